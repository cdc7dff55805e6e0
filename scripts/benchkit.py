"""What the benchmark scripts share: a Kafka broker for the length of a run.

``kafka()`` yields ``KAFKA_BOOTSTRAP_SERVERS`` when it is set; otherwise it starts a broker with
``scripts/kafka-local`` in a state dir of its own and stops it (removing its data) at the end.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

KAFKA_LOCAL = Path(__file__).resolve().parent / "kafka-local"


@contextlib.contextmanager
def kafka() -> Iterator[str]:
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if servers:
        yield servers
        return
    env = dict(os.environ, CDC_KAFKA_HOME=tempfile.mkdtemp(prefix="cdc-bench-kafka-"))
    out = subprocess.run(
        [str(KAFKA_LOCAL), "start"], env=env, capture_output=True, text=True, check=True
    )
    try:
        yield out.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(KAFKA_LOCAL), "stop"], env=env, capture_output=True)


#: The benchmarks' row shapes (``--shape``).
SHAPES = ("kv", "wide", "nested")


def shape_columns(key, shape: str) -> list:
    """The data columns of a benchmark row made from the long Column ``key``, each a function of
    it (equal keys, equal rows): ``kv`` is ``(k long, v string)``; ``wide`` six columns of other
    types (long, string, double, int, timestamp, boolean); ``nested`` six of others still (long,
    decimal, date, a string null in every fifth row, an array of three strings, a struct of an int
    and a string)."""
    from pyspark.sql import functions as F

    if shape == "kv":
        return [key.alias("k"), F.concat(F.lit("value-"), (key % 1000).cast("string")).alias("v")]
    if shape == "nested":
        return [
            key.alias("id"),
            (F.pmod(key * 7919, F.lit(10_000_000)) / 100).cast("decimal(18,2)").alias("amount"),
            F.date_add(F.lit("2026-01-01").cast("date"), (key % 365).cast("int")).alias("day"),
            F.when(key % 5 == 0, F.lit(None))
            .otherwise(F.concat(F.lit("note "), (key % 977).cast("string")))
            .alias("note"),
            F.array(
                *[F.concat(F.lit(f"t{i}-"), (key % (7 + i)).cast("string")) for i in range(3)]
            ).alias("tags"),
            F.struct((key % 1013).cast("int").alias("a"), F.hex(key % 65_521).alias("b")).alias(
                "attrs"
            ),
        ]
    return [
        key.alias("id"),
        F.sha1(key.cast("string")).alias("name"),
        (F.pmod(F.xxhash64(key), F.lit(100_000)) / 100).alias("price"),
        (key % 97).cast("int").alias("qty"),
        F.timestamp_seconds(F.lit(1_700_000_000) + key % 86_400).alias("ts"),
        (key % 3 == 0).alias("flag"),
    ]
