#!/usr/bin/env python3
"""A converter against its peer, ``CdcSink`` on the same rows made beforehand.

``--format delta`` (the default):
Makes a Delta table with its change data feed: ``--rows`` narrow rows ``(id long, name string,
price int)`` inserted in ``--commits`` commits, then an update of a tenth of them and a delete of
a twentieth (every change row counts: inserts, both update images, deletes). Then, ``--runs``
times, interleaved, each into a new topic of ``--partitions`` partitions:

* ``sink``: the change rows, mapped to updates once (``delta_changes``) and saved as parquet
  before the clock starts, written by ``CdcSink(time_column=_commit_version).write`` — one batch;
* ``convert``: ``convert_delta(once=True)`` from a new checkpoint — the stream reads the change
  feed itself and plans its versions (default ``maxFilesPerTrigger``).

``--format cockroachdb`` / ``ydb``: a changefeed topic of ``--partitions`` partitions in the
documented JSON format, ``--rows`` changes (inserts, then updates and deletes of a tenth with their
before-images, as ``diff`` / ``NEW_AND_OLD_IMAGES`` send them), a resolved message on every
partition every ``--rows / 20`` changes; ``convert`` is ``convert_kafka(once=True)`` and ``sink``
writes the same updates (made beforehand with their times) in one batch.

Prints seconds and change rows per second for each, and the ratio convert / sink; each run
checks that both topics end at the same frontier. One Spark session (``local[2]``, 4 shuffle
partitions; Delta loaded for delta). Kafka: ``KAFKA_BOOTSTRAP_SERVERS`` or a broker started here.

    .venv/bin/python scripts/bench_convert.py --rows 1000000 --runs 3
    .venv/bin/python scripts/bench_convert.py --format cockroachdb --rows 500000 --runs 3
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--format", dest="fmt", choices=["delta", "cockroachdb", "ydb"], default="delta"
    )
    args = ap.parse_args()
    if args.fmt != "delta":
        return bench_changefeed(args)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark

    from cdc_emitter import CdcSink
    from cdc_emitter.convert.delta import DIFF, VERSION, convert_delta, delta_changes, read_changes
    from cdc_emitter.spark.session import delta_package, spark_session

    package = delta_package(pyspark.__version__)
    if package is None:
        sys.exit(
            f"Delta Lake has no build for Spark {pyspark.__version__} (cdc_emitter.spark.session.DELTA_PACKAGES)"
        )
    spark = spark_session(
        "bench-convert",
        [package],
        {
            "spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "3g",
        },
        "delta",
    )
    work = Path(tempfile.mkdtemp(prefix="bench-convert-"))
    try:
        table = str(work / "table")
        from pyspark.sql import functions as F

        spark.sql(
            f"CREATE TABLE delta.`{table}` (id long, name string, price int) USING delta "
            "TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )
        per = args.rows // args.commits
        for c in range(args.commits):
            (
                spark.range(c * per, (c + 1) * per)
                .select(
                    F.col("id"),
                    F.concat(F.lit("name-"), (F.col("id") % 1000).cast("string")).alias("name"),
                    (F.col("id") % 997).cast("int").alias("price"),
                )
                .write.format("delta")
                .mode("append")
                .save(table)
            )
        spark.sql(f"UPDATE delta.`{table}` SET price = price + 1 WHERE id % 10 = 0")
        spark.sql(f"DELETE FROM delta.`{table}` WHERE id % 20 = 1")
        premade = str(work / "premade")
        delta_changes(read_changes(spark, table, starting_version=0)).write.parquet(premade)
        change_rows = spark.read.parquet(premade).count()
        print(
            f"table: {args.rows} rows in {args.commits} commits, then an update and a delete: "
            f"{change_rows} change rows; Kafka {args.partitions} partitions",
            flush=True,
        )

        with kafka() as bootstrap:

            def sink(topic: str, run: int) -> list:
                return [
                    CdcSink(bootstrap, topic, time_column=VERSION, diff_column=DIFF).write(
                        spark.read.parquet(premade)
                    )
                ]

            def convert(topic: str, run: int) -> list:
                done = []
                convert_delta(
                    spark,
                    table,
                    bootstrap_servers=bootstrap,
                    topic=topic,
                    checkpoint_location=str(work / f"ck-{run}"),
                    once=True,
                    on_batch=done.append,
                ).awaitTermination()
                return done

            compare(bootstrap, args, change_rows, "change rows", sink, convert)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def compare(bootstrap: str, args, rows: int, unit: str, sink, convert) -> None:
    """``--runs`` interleaved runs of ``sink(topic, run)`` and ``convert(topic, run)`` (each returns
    its batches' results) into new topics: seconds, ``unit`` per second, the Kafka messages
    written, the ratio per run, and min / median / max."""
    from cdc_emitter.kafka import ensure_topic

    figures: dict[str, list[float]] = {"sink": [], "convert": []}
    for run in range(1, args.runs + 1):
        ends = {}
        for who, write in (("sink", sink), ("convert", convert)):
            topic = f"bench-convert-{who}-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, topic, create=True, partitions=args.partitions)
            began = time.perf_counter()
            results = write(topic, run)
            seconds = time.perf_counter() - began
            ends[who] = results[-1].upper
            figures[who].append(seconds)
            print(
                f"run {run} {who:8s} {seconds:7.2f} s  {rows / seconds:12,.0f} {unit}/s  "
                f"{sum(r.messages for r in results):,} messages",
                flush=True,
            )
        if ends["sink"] != ends["convert"]:
            raise SystemExit(f"the topics end at different frontiers: {ends}")
        print(
            f"run {run} ratio convert/sink ({unit}/s): {figures['sink'][-1] / figures['convert'][-1]:.2f}",
            flush=True,
        )
    for who, runs in figures.items():
        print(
            f"{who:8s} seconds min {min(runs):.2f} median {statistics.median(runs):.2f} "
            f"max {max(runs):.2f}; median {rows / statistics.median(runs):,.0f} {unit}/s"
        )


def img(row: dict | None) -> dict | None:
    """A YDB image: the row without its key column."""
    return None if row is None else {k: v for k, v in row.items() if k != "id"}


def changefeed(fmt: str, rows: int, partitions: int):
    """``(messages, updates, last_upper)``: the changefeed's ``(partition, key, value)`` and the
    updates ``(id, name, price, time, diff)`` it stands for, with the upper of its last resolved."""
    import json
    import random

    rnd = random.Random(1)
    live: dict[int, dict] = {}
    messages, updates = [], []
    every = max(1, rows // 20)
    base_wall, base_step = 1_701_102_296_000_000_000, 1_670_792_400_000
    last = 0
    for tick in range(1, rows + 1):
        key = tick if tick <= rows * 0.9 or not live else rnd.choice(list(live))
        before = live.get(key)
        after = (
            None
            if before is not None and rnd.random() < 0.3
            else {"id": key, "name": f"name-{key % 1000}", "price": tick % 997}
        )
        if after is None:
            del live[key]
        else:
            live[key] = after
        time = base_wall + tick * 1000 if fmt == "cockroachdb" else base_step + tick
        p = key % partitions
        if fmt == "cockroachdb":
            value = {"after": after, "before": before, "updated": f"{time}.0000000000"}
        else:
            value = {"key": [key], "ts": [time, tick]}
            value.update(
                {"erase": {}, "oldImage": img(before)}
                if after is None
                else {
                    "update": {},
                    "newImage": img(after),
                    **({"oldImage": img(before)} if before else {}),
                }
            )
        messages.append((p, json.dumps([key]).encode(), json.dumps(value).encode()))
        for row, diff in ((before, -1), (after, 1)):
            if row is not None:
                updates.append((row["id"], row["name"], row["price"], time, diff))
        if tick % every == 0 or tick == rows:
            last = time + (500 if fmt == "cockroachdb" else 1)
            resolved = f"{last}.0000000000" if fmt == "cockroachdb" else [last, 0]
            messages += [
                (q, b"", json.dumps({"resolved": resolved}).encode()) for q in range(partitions)
            ]
    return messages, updates, last


def bench_changefeed(args) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from confluent_kafka import Producer

    from cdc_emitter import CdcSink
    from cdc_emitter.convert.changefeed import DIFF, TIME, await_conversion, convert_kafka
    from cdc_emitter.kafka import ensure_topic
    from cdc_emitter.spark.session import spark_session

    columns = "id long not null, name string, price int"
    spark = spark_session(
        "bench-convert",
        [],
        {
            "spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "3g",
        },
    )
    work = Path(tempfile.mkdtemp(prefix="bench-convert-"))
    try:
        messages, updates, last = changefeed(args.fmt, args.rows, args.partitions)
        premade = str(work / "premade")
        spark.createDataFrame(
            updates, f"id long, name string, price int, {TIME} long, {DIFF} long"
        ).write.parquet(premade)
        print(
            f"{args.fmt}: {args.rows} changes ({len(updates)} updates, {len(messages)} messages) over "
            f"{args.partitions} partitions",
            flush=True,
        )
        with kafka() as bootstrap:
            source = f"bench-convert-source-{uuid.uuid4().hex[:8]}"
            ensure_topic(bootstrap, source, create=True, partitions=args.partitions)
            producer = Producer(
                {"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True}
            )
            for p, key, value in messages:
                while True:
                    try:
                        producer.produce(source, value=value, key=key or None, partition=p)
                        break
                    except BufferError:
                        producer.poll(0.1)
            if producer.flush(60):
                raise SystemExit("the changefeed was not acknowledged")

            def sink(topic: str, run: int) -> list:
                return [
                    CdcSink(bootstrap, topic, time_column=TIME, diff_column=DIFF).write_upto(
                        spark.read.parquet(premade), 0, last
                    )
                ]

            def convert(topic: str, run: int) -> list:
                done = []
                await_conversion(
                    lambda: convert_kafka(
                        spark,
                        args.fmt,
                        source,
                        columns=columns,
                        key=["id"],
                        bootstrap_servers=bootstrap,
                        topic=topic,
                        checkpoint_location=str(work / f"ck-{run}"),
                        once=True,
                        on_batch=done.append,
                    )
                )
                return done

            compare(bootstrap, args, args.rows, "changes", sink, convert)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
