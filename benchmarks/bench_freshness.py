#!/usr/bin/env python3
"""How soon a time written by ``CdcSink`` is in the Delta table ``cdc-emitter apply`` keeps,
measured in trigger intervals (issue 58: within 2).

One local[2] Spark session with Delta and the sink's packages runs the apply query (the ``cdcv2``
source, ``apply_changes`` in ``foreachBatch``, ``processingTime`` of ``--interval`` seconds) while
the main thread writes ``--rounds`` times, one ``CdcSink.write`` of ``--rows`` rows each, at a
random phase of the trigger (a pause of 0 to 1.5 intervals between writes). A round's latency
runs from the moment ``write`` returns (its updates and statement committed) to the moment the
Delta commit that holds its time returns. The ratio is that latency over the interval, round by
round (lower is better; target at most 2). The peer is the trigger interval itself: there is no
other tool whose table holds only complete times to compare with.

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local``.

    .venv/bin/python benchmarks/bench_freshness.py --rounds 10 --interval 1
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchkit  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="times written and measured")
    parser.add_argument("--rows", type=int, default=200, help="rows per time")
    parser.add_argument("--interval", type=float, default=1.0, help="trigger interval, seconds")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = parser.parse_args()

    import pyspark
    from pyspark.sql import functions as F

    from cdc_emitter import CdcSink, register
    from cdc_emitter.read.apply import apply_changes
    from cdc_emitter.spark.session import delta_package, spark_session
    from cdc_emitter.spark.setup import sink_packages

    work = Path(tempfile.mkdtemp(prefix="cdc-bench-freshness-"))
    spark = spark_session(
        "cdc-emitter-bench-freshness",
        [delta_package(pyspark.__version__), *sink_packages()],
        {
            "spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
        },
        "delta",
    )
    spark.sparkContext.setLogLevel("ERROR")
    if not hasattr(spark, "dataSource"):
        print("the cdcv2 source needs PySpark 4.0 or newer", file=sys.stderr)
        return 2
    register(spark)
    committed: list[tuple[float, int]] = []  # (when the commit returned, the time it holds)
    lock = threading.Lock()

    def rows(time_: int):
        key = F.col("id") + time_ * args.rows
        return spark.range(args.rows).select(*benchkit.shape_columns(key, "kv"))

    with benchkit.kafka() as servers:
        topic, table = f"bench-freshness-{uuid.uuid4().hex[:8]}", str(work / "table")
        sink = CdcSink(servers, topic, create_topic=True, topic_partitions=2)
        sink.write(rows(0), time=0)  # the schema, for the source

        def apply(df, _batch_id):
            result = apply_changes(df, table, topic)
            if result.version is not None:
                with lock:
                    committed.append((time.monotonic(), result.time))

        query = (
            spark.readStream.format("cdcv2")
            .option("kafka.bootstrap.servers", servers)
            .option("topic", topic)
            .load()
            .writeStream.foreachBatch(apply)
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(processingTime=f"{int(args.interval * 1000)} milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 120
            while not committed and time.monotonic() < deadline:  # time 0 applied: warm
                time.sleep(0.05)
            rounds, rng = [], random.Random(7)
            for time_ in range(1, args.rounds + 1):
                time.sleep(rng.uniform(0, 1.5) * args.interval)
                sink.write(rows(time_), time=time_)
                written = time.monotonic()
                deadline = written + 60 * args.interval + 60
                landed = None
                while landed is None and time.monotonic() < deadline:
                    with lock:
                        landed = next((at for at, t in committed if t >= time_), None)
                    time.sleep(0.01)
                if landed is None:
                    print(f"time {time_} never reached the table", file=sys.stderr)
                    return 1
                latency = max(0.0, landed - written)
                rounds.append({"time": time_, "seconds": latency})
                print(f"time {time_}: in the table {latency:.2f}s after its write returned")
        finally:
            query.stop()
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)

    per_round = [r["seconds"] / args.interval for r in rounds]
    print(
        f"latency over the trigger interval ({args.interval:g}s): median "
        f"{statistics.median(per_round):.2f}, min {min(per_round):.2f}, max {max(per_round):.2f} "
        "(target: at most 2)"
    )
    benchkit.write_json(
        args.json,
        "freshness",
        vars(args),
        rounds,
        [
            benchkit.ratio(
                "apply latency / trigger interval",
                "a time's write returned -> its Delta commit returned",
                "the trigger interval",
                per_round,
                better="lower",
                target=2.0,
                meaning="intervals from a time's write to the apply commit that holds it",
            )
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
