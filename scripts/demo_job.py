#!/usr/bin/env python3
"""The demo's Spark job: a Structured Streaming query that keeps a small `products` table in Kafka.

Change files (JSON lines of ``id, name, price, diff``) are dropped into an input directory; the
query reads one file per micro-batch and writes it through ``CdcSink`` (``foreachBatch``), so
batch ``b`` becomes CDC time ``b``:

* batch 0: insert apple, pear, plum
* batch 1: apple's price 10 -> 12 (a retraction and an insertion), insert fig
* batch 2: delete pear, plum's price 7 -> null, insert kiwi twice (multiplicity 2)

It writes the topic's Avro schema to ``<work>/products.avsc`` (for ``cdc-emitter verify``) and
prints the table it expects ``verify --output`` to reconstruct.

    python scripts/demo_job.py --bootstrap-servers 127.0.0.1:9092 --topic products --work ./demo-work
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

BATCHES = [
    [  # time 0
        {"id": 1, "name": "apple", "price": 10, "diff": 1},
        {"id": 2, "name": "pear", "price": 5, "diff": 1},
        {"id": 3, "name": "plum", "price": 7, "diff": 1},
    ],
    [  # time 1
        {"id": 1, "name": "apple", "price": 10, "diff": -1},
        {"id": 1, "name": "apple", "price": 12, "diff": 1},
        {"id": 4, "name": "fig", "price": 3, "diff": 1},
    ],
    [  # time 2
        {"id": 2, "name": "pear", "price": 5, "diff": -1},
        {"id": 3, "name": "plum", "price": 7, "diff": -1},
        {"id": 3, "name": "plum", "price": None, "diff": 1},
        {"id": 5, "name": "kiwi", "price": 4, "diff": 1},
        {"id": 5, "name": "kiwi", "price": 4, "diff": 1},
    ],
]


def _key(item):
    (pid, name, price), _n = item
    return (pid, name, price is not None, price or 0)


def expected_table() -> list[tuple[dict, int]]:
    counts: dict[tuple, int] = {}
    for batch in BATCHES:
        for row in batch:
            key = (row["id"], row["name"], row["price"])
            counts[key] = counts.get(key, 0) + row["diff"]
    return [
        ({"id": k[0], "name": k[1], "price": k[2]}, n)
        for k, n in sorted(counts.items(), key=_key)
        if n
    ]


def say(text: str) -> None:
    """One step of the demo, as it happens."""
    print(f"   {text}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--topic", required=True)
    ap.add_argument("--work", required=True, help="a directory for input files and checkpoint")
    args = ap.parse_args()
    if not args.bootstrap_servers:
        ap.error("--bootstrap-servers or KAFKA_BOOTSTRAP_SERVERS is required")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import logging

    logging.getLogger("cdc_emitter.kafka.librdkafka").setLevel(logging.ERROR)
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    from cdc_emitter import CdcSink
    from cdc_emitter.protocol.codec import union_schema
    from cdc_emitter.spark.schema import data_schema

    work = Path(args.work)
    incoming = work / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    base = int(time.time()) - 60
    for i, batch in enumerate(BATCHES):
        path = incoming / f"changes-{i:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch))
        os.utime(path, (base + i, base + i))  # the file source takes files in mtime order

    say(
        f"wrote {len(BATCHES)} files of changes (inserts, updates, deletes) to "
        f"{incoming.name}/; starting Spark (its first start downloads the Kafka and Avro "
        "packages, a minute or two)"
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("cdc-emitter-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType(), True),
            T.StructField("price", T.IntegerType(), True),
            T.StructField("diff", T.LongType(), False),
        ]
    )
    changes = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(incoming))
    # the topic's schema is the one the sink derives from the DataFrame (file sources make
    # every column nullable): write it for `cdc-emitter verify --schema`
    data_struct = T.StructType([f for f in changes.schema.fields if f.name != "diff"])
    (work / "products.avsc").write_text(
        json.dumps(union_schema(data_schema(data_struct)), indent=2)
    )
    sink = CdcSink(
        args.bootstrap_servers,
        args.topic,
        create_topic=True,
        checkpoint_location=str(work / "checkpoint"),
        on_batch=lambda r: say(
            f"micro-batch {r.batch_id}: {r.updates} updates at time {r.lower} and their "
            f"progress statement [{r.lower}, {r.upper}) written"
        ),
    )
    say(f"Spark is up; streaming the changes, one micro-batch per file, to topic {args.topic}")
    query = (
        changes.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        print(f"demo job failed: {query.exception()}", file=sys.stderr)
        return 1
    print(
        f"streaming query wrote {len(BATCHES)} batches (CDC times 0..{len(BATCHES) - 1}) "
        f"to topic {args.topic}"
    )
    print("the table the changefeed must reconstruct:")
    for data, count in expected_table():
        print(f"  {json.dumps(data)} x{count}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
