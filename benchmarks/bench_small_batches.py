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

Prints the median, min and max seconds per batch of each and the median ratios to the peer;
``--json FILE`` also writes each round's seconds and each ratio round by round (a contender's
time over the peer's in the same round; target: at most 1.5× for ``jvm`` and ``jvm-stream``).

The rows: ``--shape`` kv ``(k long, v string)`` or wide (six columns of other types, as
``bench_sink.py``'s); ``--times T``: each also carries a time column (the sink in column mode,
batch ``i``'s times from ``i*T``); ``--uncached``: the input is computed again each batch, as a
source's micro-batch is, instead of cached.

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` (its
own state dir, stopped at the end).

    .venv/bin/python benchmarks/bench_small_batches.py --rows 200 --batches 15
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchkit import SHAPES, kafka, local_spark, ratio, shape_columns, write_json  # noqa: E402

CONTENDERS = ("jvm", "jvm-stream", "jvm-executors", "python", "peer")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--shape",
        choices=SHAPES,
        default="kv",
        help="kv: (k long, v string); wide: six columns of other types (as bench_sink.py's)",
    )
    ap.add_argument(
        "--times",
        type=int,
        default=0,
        help="the rows also carry a time column t (row i at batch*T + i %% T): the sink "
        "in column mode, the peer writing t into each record",
    )
    ap.add_argument(
        "--uncached",
        action="store_true",
        help="recompute the input every batch, as a source's micro-batch is, instead of caching it",
    )
    ap.add_argument(
        "--only",
        default=None,
        help="comma list of contenders besides the peer: jvm,jvm-stream,jvm-executors,python "
        "(default: all)",
    )
    ap.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help="also write the results (each round's seconds, the ratios round by round) to FILE",
    )
    args = ap.parse_args()
    only = set(args.only.split(",")) | {"peer"} if args.only else None
    if only and only - set(CONTENDERS):
        ap.error(f"--only: unknown contenders {sorted(only - set(CONTENDERS))}")
    spark = local_spark("bench-small-batches", {"spark.sql.shuffle.partitions": "2"})
    from cdc_emitter import CdcSink
    from cdc_emitter.kafka import ensure_topic

    checkpoint = None
    try:
        with kafka() as bootstrap:
            topic = f"bench-small-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, topic, create=True, partitions=2)
            from pyspark.sql import functions as F
            from pyspark.sql.avro.functions import to_avro

            from cdc_emitter.spark.schema import data_schema

            key = F.col("id")
            columns = shape_columns(key, args.shape)
            if args.times:
                columns.append((key % F.lit(args.times)).alias("t"))
            df = spark.range(args.rows).select(*columns)
            data_cols = [c for c in df.columns if c != "t"]
            if not args.uncached:
                df = df.cache()
                df.count()

            def batch(i: int):  # batch i's rows: in column mode, its times past the last batch's
                return df.withColumn("t", F.col("t") + F.lit(i * args.times)) if args.times else df

            peer_topic = f"bench-small-peer-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, peer_topic, create=True, partitions=2)
            python_topic = f"bench-small-py-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, python_topic, create=True, partitions=2)
            stream_topic = f"bench-small-stream-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, stream_topic, create=True, partitions=2)
            executors_topic = f"bench-small-exec-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, executors_topic, create=True, partitions=2)
            checkpoint = tempfile.mkdtemp(prefix="cdc-bench-checkpoint-")
            mode = {"time_column": "t"} if args.times else {}
            sinks = {
                "jvm": CdcSink(bootstrap, topic, encoder="jvm", **mode),
                "jvm-stream": CdcSink(
                    bootstrap,
                    stream_topic,
                    encoder="jvm",
                    checkpoint_location=checkpoint,
                    writer_id="bench",
                    **mode,
                ),
                "jvm-executors": CdcSink(
                    bootstrap, executors_topic, encoder="jvm", small_batch_rows=0, **mode
                ),
                "python": CdcSink(bootstrap, python_topic, encoder="python", **mode),
            }
            record = data_schema(df.select(*data_cols, *(["t"] if args.times else [])).schema)
            schema = json.dumps(record)

            def peer(i: int) -> None:
                (
                    batch(i)
                    .select(to_avro(F.struct(*df.columns), schema).alias("value"))
                    .write.format("kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", peer_topic)
                    .save()
                )

            def write(name: str):
                if args.times:
                    return lambda i: sinks[name].write(batch(i))
                return lambda i: sinks[name].write(df, time=i)

            def stream(i: int) -> None:
                sinks["jvm-stream"](batch(i), i)

            contenders = {
                "jvm": write("jvm"),
                "jvm-stream": stream,
                "jvm-executors": write("jvm-executors"),
                "python": write("python"),
                "peer": peer,
            }
            if only:
                contenders = {k: v for k, v in contenders.items() if k in only}
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
    rows = ", ".join(
        [
            args.shape,
            f"{args.times} times each" if args.times else "one time each",
            *(["uncached"] if args.uncached else []),
        ]
    )
    print(
        f"{args.rows}-row batches ({rows}), {args.batches} rounds after {args.warmup} warm-up "
        "(seconds per batch):"
    )
    for name, values in seconds.items():
        print(
            f"  {name:13s} median {statistics.median(values):.3f}  min {min(values):.3f}  "
            f"max {max(values):.3f}"
        )
    peer_median = statistics.median(seconds["peer"])
    labels = {
        "jvm": "CdcSink.write, JVM data path",
        "jvm-stream": "CdcSink as a foreachBatch function (with its sink log)",
        "jvm-executors": "CdcSink.write, every batch on the executors (small_batch_rows=0)",
        "python": "CdcSink.write, pure-Python encoder",
        "peer": "to_avro + Spark's Kafka sink",
    }
    ratios = []
    for name in ("jvm", "jvm-stream", "jvm-executors", "python"):
        if name not in seconds:
            continue
        print(f"  {name}/peer median ratio: {statistics.median(seconds[name]) / peer_median:.2f}x")
        ratios.append(
            ratio(
                f"{name}/peer",
                labels[name],
                labels["peer"],
                [ours / theirs for ours, theirs in zip(seconds[name], seconds["peer"])],
                better="lower",
                target=1.5 if name in ("jvm", "jvm-stream") else None,
                meaning="time: seconds per batch of ours over the peer's, in the same round",
                of_medians=statistics.median(seconds[name]) / peer_median,
            )
        )
    write_json(
        args.json,
        "small",
        {
            "rows": args.rows,
            "rounds": args.batches,
            "warmup": args.warmup,
            "shape": args.shape,
            "times": args.times,
            "uncached": args.uncached,
            "contenders": list(seconds),
        },
        [{name: values[i] for name, values in seconds.items()} for i in range(args.batches)],
        ratios,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
