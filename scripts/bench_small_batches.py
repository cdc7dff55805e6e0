#!/usr/bin/env python3
"""The fixed cost of one small batch through CdcSink: ``--batches`` writes of the same
``--rows``-row DataFrame (cached) at times 0, 1, 2... to one topic, after ``--warmup`` writes,
in one local[2] Spark session. Prints the median, min and max seconds per batch.

Run it on two checkouts to see what a change costs per batch (the guards, for instance).

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` (its
own state dir, stopped at the end).

    .venv/bin/python scripts/bench_small_batches.py --rows 200 --batches 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
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

    spark = (SparkSession.builder.master("local[2]").appName("bench-small-batches")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with kafka() as bootstrap:
            topic = f"bench-small-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, topic, create=True, partitions=2)
            df = spark.range(args.rows).selectExpr("id AS k", "concat('v', id) AS v").cache()
            df.count()
            sink = CdcSink(bootstrap, topic, encoder="python")
            seconds = []
            for i in range(args.warmup + args.batches):
                began = time.perf_counter()
                sink.write(df, time=i)
                if i >= args.warmup:
                    seconds.append(time.perf_counter() - began)
    finally:
        spark.stop()
    print(f"CdcSink.write of {args.rows} rows, {args.batches} batches after {args.warmup} warm-up: "
          f"median {statistics.median(seconds):.3f}s min {min(seconds):.3f}s max {max(seconds):.3f}s "
          "per batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
