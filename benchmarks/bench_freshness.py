#!/usr/bin/env python3
"""How soon a time written by ``CdcSink`` is in the Delta table ``cdc-emitter apply`` keeps,
measured in trigger intervals (issue 58: within 2).

One local[2] Spark session with Delta and the sink's packages runs ``apply_topic`` (what
``cdc-emitter apply`` runs: the ``cdcv2`` source, one Delta ``MERGE`` per micro-batch,
``processingTime`` of ``--interval`` seconds) in a thread of its own while
the main thread writes ``--rounds`` times, one ``CdcSink.write`` of ``--rows`` rows each, at a
random phase of the trigger (a pause of 0 to 1.5 intervals between writes). A round's latency
runs from the moment ``write`` returns (its updates and statement committed) to the moment the
Delta commit that holds its time returns. The ratio is that latency over the interval, round by
round (lower is better; target at most 2). The peer is the trigger interval itself: there is no
other tool whose table holds only complete times to compare with.

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local``.

    .venv/bin/python benchmarks/bench_freshness.py --rounds 10 --interval 1,5
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
    parser.add_argument("--rounds", type=int, default=10, help="times written per interval")
    parser.add_argument("--rows", type=int, default=200, help="rows per time")
    parser.add_argument(
        "--interval",
        default="1,5",
        help="trigger intervals in seconds, a comma list: each is measured with its own query",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = parser.parse_args()
    try:
        intervals = [float(x) for x in args.interval.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--interval {args.interval!r}: say seconds, such as 1 or 1,5")
    if not intervals or min(intervals) <= 0:
        parser.error(f"--interval {args.interval!r}: say seconds above 0, such as 1 or 1,5")

    import pyspark

    from cdc_emitter import register
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
    rounds: list[dict] = []
    ratios = []
    try:
        with benchkit.kafka() as servers:
            for interval in intervals:
                measured = measure(spark, servers, work / f"every-{interval:g}s", interval, args)
                if measured is None:
                    return 1
                rounds += measured
                per_round = [r["seconds"] / interval for r in measured]
                seconds = [r["seconds"] for r in measured]
                print(
                    f"every {interval:g}s: latency over the interval: median "
                    f"{statistics.median(per_round):.2f}, min {min(per_round):.2f}, max "
                    f"{max(per_round):.2f} (target: at most 2); in seconds: median "
                    f"{statistics.median(seconds):.2f}, min {min(seconds):.2f}, max "
                    f"{max(seconds):.2f}",
                    flush=True,
                )
                ratios.append(
                    benchkit.ratio(
                        f"latency / interval, every {interval:g}s",
                        "a time's write returned -> its Delta commit returned",
                        f"the trigger interval ({interval:g}s)",
                        per_round,
                        better="lower",
                        target=2.0,
                        meaning="intervals from a time's write to the apply commit that holds it",
                    )
                )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    benchkit.write_json(args.json, "freshness", vars(args), rounds, ratios)
    return 0


def measure(spark, servers: str, work: Path, interval: float, args) -> list[dict] | None:
    """``args.rounds`` times written to a new topic while ``apply_topic`` follows it every
    ``interval`` seconds; each round's seconds from its write to its commit (None: failed)."""
    from pyspark.sql import functions as F

    from cdc_emitter import CdcSink
    from cdc_emitter.read.apply import ApplyResult, apply_topic

    committed: list[tuple[float, int]] = []  # (when the commit returned, the time it holds)
    lock = threading.Lock()

    def rows(time_: int):
        key = F.col("id") + time_ * args.rows
        return spark.range(args.rows).select(*benchkit.shape_columns(key, "kv"))

    topic, table = f"bench-freshness-{uuid.uuid4().hex[:8]}", str(work / "table")
    sink = CdcSink(servers, topic, create_topic=True, topic_partitions=2)
    sink.write(rows(0), time=0)  # the schema, for the source

    def applied(result: ApplyResult) -> None:
        if result.version is not None:
            with lock:
                committed.append((time.monotonic(), result.time))

    failed: list[BaseException] = []

    def follow() -> None:
        try:
            apply_topic(
                spark,
                servers,
                topic,
                table,
                str(work / "checkpoint"),
                once=False,
                trigger_interval=f"{int(interval * 1000)} milliseconds",
                on_batch=applied,
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failed.append(exc)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    measured = []
    try:
        deadline = time.monotonic() + 120
        while not committed and not failed and time.monotonic() < deadline:  # time 0: warm
            time.sleep(0.05)
        if not committed:
            print(
                f"time 0 never reached the table: {failed or 'no commit in 120 s'}", file=sys.stderr
            )
            return None
        rng = random.Random(7)
        for time_ in range(1, args.rounds + 1):
            time.sleep(rng.uniform(0, 1.5) * interval)  # a random phase of the trigger
            sink.write(rows(time_), time=time_)
            written = time.monotonic()
            deadline = written + 60 * interval + 60
            landed = None
            while landed is None and not failed and time.monotonic() < deadline:
                with lock:
                    landed = next((at for at, t in committed if t >= time_), None)
                time.sleep(0.01)
            if landed is None:
                print(f"time {time_} never reached the table: {failed}", file=sys.stderr)
                return None
            latency = max(0.0, landed - written)
            measured.append({"interval": interval, "time": time_, "seconds": latency})
            print(f"every {interval:g}s: time {time_} in the table {latency:.2f}s after its write")
    finally:  # stop the query, even one that started only now, before the next interval's
        deadline = time.monotonic() + 60
        while follower.is_alive() and time.monotonic() < deadline:
            for query in spark.streams.active:
                query.stop()
            follower.join(1)
    return measured


if __name__ == "__main__":
    sys.exit(main())
