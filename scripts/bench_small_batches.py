#!/usr/bin/env python3
"""The fixed cost of one small batch through CdcSink against Spark's own Kafka sink: ``--batches``
rounds, after ``--warmup``, each writing the same ``--rows``-row DataFrame (cached) once through
every contender, interleaved, in one local[2] Spark session:

* ``jvm``: ``CdcSink(encoder="jvm").write(df, time=i)`` (the default with the packages loaded):
  after the first batch, a small batch is finished on the driver (one narrow Spark job);
* ``jvm-executors``: the same with ``small_batch_rows=0``: every batch consolidated and written
  on the executors (a shuffle job, then Spark's Kafka writer);
* ``jvm-stream``: the same sink as a ``foreachBatch`` function, ``sink(df, i)``, with a
  checkpoint location: what a streaming query's batch costs in the sink, its sink log included;
* ``python``: ``CdcSink(encoder="python")``, librdkafka on the executors;
* ``peer``: ``to_avro`` per row + ``df.write.format("kafka")`` — what a user would otherwise
  write (no consolidation, no progress statements, no guards).

Prints the median, min and max seconds per batch of each and the median ratios to the peer.

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` (its
own state dir, stopped at the end).

    .venv/bin/python scripts/bench_small_batches.py --rows 200 --batches 15
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchkit import kafka  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from cdc_emitter import CdcSink
    from cdc_emitter.kafka_io import ensure_topic

    from cdc_emitter import configure_spark

    spark = (configure_spark(SparkSession.builder.master("local[2]").appName("bench-small-batches"))
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    checkpoint = None
    try:
        with kafka() as bootstrap:
            topic = f"bench-small-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, topic, create=True, partitions=2)
            df = spark.range(args.rows).selectExpr("id AS k", "concat('v', id) AS v").cache()
            df.count()
            from pyspark.sql import functions as F
            from pyspark.sql.avro.functions import to_avro

            peer_topic = f"bench-small-peer-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, peer_topic, create=True, partitions=2)
            python_topic = f"bench-small-py-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, python_topic, create=True, partitions=2)
            stream_topic = f"bench-small-stream-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, stream_topic, create=True, partitions=2)
            executors_topic = f"bench-small-exec-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, executors_topic, create=True, partitions=2)
            checkpoint = tempfile.mkdtemp(prefix="cdc-bench-checkpoint-")
            sinks = {"jvm": CdcSink(bootstrap, topic, encoder="jvm"),
                     "jvm-stream": CdcSink(bootstrap, stream_topic, encoder="jvm",
                                           checkpoint_location=checkpoint, writer_id="bench"),
                     "jvm-executors": CdcSink(bootstrap, executors_topic, encoder="jvm", small_batch_rows=0),
                     "python": CdcSink(bootstrap, python_topic, encoder="python")}
            schema = ('{"type":"record","name":"r","fields":[{"name":"k","type":"long"},'
                      '{"name":"v","type":"string"}]}')

            def peer(_i: int) -> None:
                (df.select(to_avro(F.struct("k", "v"), schema).alias("value"))
                 .write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", peer_topic).save())

            contenders = {"jvm": lambda i: sinks["jvm"].write(df, time=i),
                          "jvm-stream": lambda i: sinks["jvm-stream"](df, i),
                          "jvm-executors": lambda i: sinks["jvm-executors"].write(df, time=i),
                          "python": lambda i: sinks["python"].write(df, time=i), "peer": peer}
            seconds: dict = {name: [] for name in contenders}
            for i in range(args.warmup + args.batches):
                for name, run in contenders.items():
                    began = time.perf_counter()
                    run(i)
                    if i >= args.warmup:
                        seconds[name].append(time.perf_counter() - began)
    finally:
        spark.stop()
        if checkpoint is not None:
            shutil.rmtree(checkpoint, ignore_errors=True)
    print(f"{args.rows}-row batches, {args.batches} rounds after {args.warmup} warm-up (seconds per batch):")
    for name, values in seconds.items():
        print(f"  {name:13s} median {statistics.median(values):.3f}  min {min(values):.3f}  "
              f"max {max(values):.3f}")
    peer_median = statistics.median(seconds["peer"])
    for name in ("jvm", "jvm-stream", "jvm-executors", "python"):
        print(f"  {name}/peer median ratio: {statistics.median(seconds[name]) / peer_median:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
