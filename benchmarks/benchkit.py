"""What the benchmark scripts share: a Kafka broker for the length of a run, the rows, and the
shape of the results they write with ``--json FILE`` (read by ``benchmarks/run.py``).

``kafka()`` yields ``KAFKA_BOOTSTRAP_SERVERS`` when it is set; otherwise it starts a broker with
``scripts/kafka-local`` in a state dir of its own and stops it (removing its data) at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KAFKA_LOCAL = ROOT / "scripts" / "kafka-local"


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


def local_spark(app: str, conf: dict[str, str] | None = None):
    """A ``local[2]`` Spark session with the sink's packages (`configure_spark`), its UI and
    progress bar off and its log at ERROR, plus ``conf``; the Python of this process for its
    workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from cdc_emitter import configure_spark

    builder = configure_spark(SparkSession.builder.master("local[2]").appName(app))
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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


def ratio(
    name: str,
    ours: str,
    peer: str,
    per_round: list[float],
    *,
    better: str = "higher",
    target: float | None = None,
    meaning: str = "",
    **extra,
) -> dict:
    """One ratio of a benchmark against its peer, round by round, as ``--json`` writes it.

    ``better``: ``"higher"`` (a speed ratio: ours at least ``target``) or ``"lower"`` (a time
    ratio: ours at most ``target``); ``target`` None: reported, not judged; ``extra``: other
    figures of the ratio (such as the ratio of the fastest rounds)."""
    values = [float(v) for v in per_round]
    return {
        "name": name,
        "ours": ours,
        "peer": peer,
        "meaning": meaning,
        "better": better,
        "target": target,
        "per_round": values,
        "min": min(values) if values else None,
        "median": statistics.median(values) if values else None,
        "max": max(values) if values else None,
        **extra,
    }


def write_json(
    path: str | None, benchmark: str, parameters: dict, rounds: list, ratios: list, **extra
) -> None:
    """Write a benchmark's results to ``path`` (nothing when None): its parameters, each round's
    figures and its ratios against its peer (see :func:`ratio`)."""
    if not path:
        return
    data = {
        "benchmark": benchmark,
        "parameters": parameters,
        "rounds": rounds,
        "ratios": ratios,
        **extra,
    }
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2)
        out.write("\n")
