#!/usr/bin/env python
"""Benchmark: CdcSink against Spark's built-in Kafka sink, same cached input, same run.

Pipelines, each writing to its own new topic on the same broker:

0. ``cdc-sink (jvm)``: ``CdcSink.write`` on the JVM data path (Spark SQL + Spark's Kafka writer;
   the default when both packages are loaded).
1. ``cdc-sink (python)``: ``CdcSink.write`` with the pure-Python encoder (Arrow → fastavro).
2. ``diy kafka sink``: the do-it-yourself pipeline — the same consolidation, then ``to_avro``
   per update, framed as a one-update CDC array message (Confluent header + union branch 0 +
   count 1 + item + 0), one Kafka record per update through Spark's ``kafka`` sink, with the
   writer options the sink's JVM path uses (``acks=all``, lz4, 1 MB batches, not idempotent;
   ``--peer-writer lz4``: lz4, idempotent, Java's default batch, as earlier rounds measured). No progress statements
   (it could not write correct ones anyway).
3. ``raw kafka sink``: Spark's ``kafka`` sink on the unconsolidated rows, ``to_avro`` per row
   (a ceiling for reference: no consolidation, no arrays, no progress).
4. ``floor``: the same consolidation written to Spark's ``noop`` sink — what any correct sink pays
   before it writes a byte (its "updates": the distinct pairs, counted by construction).

Input: ``--rows`` narrow rows ``(k long, v string, diff long)`` (``--shape wide``: six columns of
other types), cached and counted before timing: all distinct, or ``--keys`` of them, each
repeated (row i is made from ``i % keys``), so that every pipeline consolidates. ``--times T``:
the rows also carry a time column ``t`` (row i at ``i % T``; the sink in column mode, the peers
grouping on data and time); else every row has the batch's one time. Every pipeline writes the
same updates.
spark-avro and spark-sql-kafka-0-10 come from Maven Central through ``spark.jars.packages``,
at the installed Spark version if Maven Central has it, else the newest release of the same
major version below it (``--packages-version`` to choose).

Usage::

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/bench_sink.py --rows 4000000
    # or without KAFKA_BOOTSTRAP_SERVERS: starts scripts/kafka-local

``--same-sink``: the cdc-sink pipelines write every round through one sink and topic, each round
the sink's next batch after an untimed one of the same input — what a streaming query's batches
see (a sink chooses a batch's way from the one before); by default each round is a new sink's
first batch, as a one-off ``write``, in a process that learnt the data layout in the warm-up (the
shared plan, and whether its rows repeat: a first batch that does not know bets they do not).
``--cold``: each round's sink as a new process's first (the layout forgotten; the JVM warm).
``--restart``: each round's sink as a restarted job's (the layout forgotten, as with ``--cold``),
on a topic that already holds a batch of the same input (written once, untimed, before the
rounds): what a scheduled job, a restarted query or a second ``cdc-emitter export`` to the same
topic meets, where the sink's first batch follows the topic's last one.

Prints input rows/s for each pipeline (its fastest round) and the ratios of those; with ``--repeat``
above 1, each ratio also round by round (min, median, max); ``--json FILE`` writes the parameters,
each round's seconds and the ratios round by round to FILE (as ``benchmarks/run.py`` reads them).

``--small`` measures the other figure, the fixed cost of a small batch against Spark's Kafka sink
(``benchmarks/bench_small_batches.py``; the arguments after ``--small`` go to it)::

    .venv/bin/python benchmarks/bench_sink.py --small --rows 200 --batches 12
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from benchkit import SHAPES, ratio, shape_columns, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CENTRAL = "https://repo1.maven.org/maven2/org/apache/spark"


def _version_key(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def packages_version(installed: str) -> str:
    """The installed Spark version if Maven Central has spark-avro for it, else the newest below it."""
    try:
        url = f"{CENTRAL}/spark-avro_2.13/maven-metadata.xml"
        with urllib.request.urlopen(url, timeout=20) as resp:
            text = resp.read().decode()
    except OSError as exc:
        print(f"cannot reach Maven Central ({exc}); trying version {installed}", file=sys.stderr)
        return installed
    versions = [
        v for v in re.findall(r"<version>([^<]+)</version>", text) if re.fullmatch(r"[\d.]+", v)
    ]
    if installed in versions:
        return installed
    same_major = [
        v
        for v in versions
        if v.split(".")[0] == installed.split(".")[0] and _version_key(v) <= _version_key(installed)
    ]
    chosen = max(same_major or versions, key=_version_key)
    print(f"Maven Central has no spark-avro {installed}; using {chosen}", file=sys.stderr)
    return chosen


def broker() -> str:
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if env:
        return env
    out = subprocess.run(
        [str(ROOT / "scripts" / "kafka-local"), "start"], check=True, capture_output=True, text=True
    ).stdout
    return out.strip().splitlines()[-1]


def main() -> int:
    if sys.argv[1:2] == ["--small"]:
        small = [sys.executable, str(ROOT / "benchmarks" / "bench_small_batches.py"), *sys.argv[2:]]
        return subprocess.run(small).returncode
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="--small [ARGS]: the small-batch benchmark instead (bench_small_batches.py)",
    )
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument(
        "--keys",
        type=int,
        default=None,
        help="distinct (k, v) pairs among the rows (default: every row distinct); fewer: "
        "each pair on several rows, which every pipeline consolidates",
    )
    ap.add_argument(
        "--shape",
        choices=SHAPES,
        default="kv",
        help="kv: (k long, v string) with 1,000 distinct short strings; wide: (id long, name "
        "string of 40 hex digits, price double, qty int, ts timestamp, flag boolean); "
        "nested: (id long, amount decimal(18,2), day date, note string null in every "
        "fifth row, tags array<string> of 3, attrs struct<a int, b string>)",
    )
    ap.add_argument(
        "--times",
        type=int,
        default=None,
        help="rows carry their times: a column t of this many distinct times (row i at time "
        "i %% TIMES), the sink in column mode and every pipeline consolidating per (data, "
        "time); default: one batch time, as write(df, time=...)",
    )
    ap.add_argument("--partitions", type=int, default=2, help="topic partitions")
    ap.add_argument(
        "--shuffle-partitions",
        type=int,
        default=4,
        help="spark.sql.shuffle.partitions (Spark's default is 200)",
    )
    ap.add_argument("--packages-version", default=None)
    ap.add_argument("--only", default=None, help="comma list: jvm,python,diy,raw,floor")
    ap.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help="also write the results (parameters, each round's seconds, the ratios round by "
        "round) to FILE as JSON",
    )
    ap.add_argument(
        "--peer-writer",
        choices=("sink", "lz4"),
        default="sink",
        help="the Kafka writer options of the do-it-yourself and raw pipelines: sink (default): "
        "those of the sink's JVM path (acks=all, lz4, 1 MB batches, not idempotent); lz4: "
        "lz4-compressed, idempotent, Java's default batch size (the peer of earlier rounds)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds: each pipeline timed once per round, interleaved (best kept)",
    )
    ap.add_argument(
        "--same-sink",
        action="store_true",
        help="cdc-sink: one sink and topic for every round, each round its next batch (as in a "
        "streaming query, where a batch follows one of the same size), after one untimed "
        "batch of the whole input; default: a new sink and topic each round (a first batch)",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="cdc-sink, a new sink each round: before each, forget what the process learnt of "
        "the data layout (its plan, whether its rows repeat), as a new process's first "
        "batch would (the JVM stays warm); default: the rounds after the warm-up know it",
    )
    ap.add_argument(
        "--restart",
        action="store_true",
        help="cdc-sink: each round a new sink, the layout forgotten as with --cold, on one topic "
        "that an earlier sink wrote a batch of the same input to (untimed, before the rounds): "
        "a restarted job's first batch",
    )
    args = ap.parse_args()
    if args.cold and args.same_sink:
        ap.error("--cold is for a new sink each round, not --same-sink")
    if args.restart and (args.same_sink or args.cold):
        ap.error(
            "--restart is a new sink each round on a written topic: not with --same-sink or --cold"
        )

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    from cdc_emitter import CdcSink
    from cdc_emitter.kafka import end_offsets, ensure_topic
    from cdc_emitter.protocol.codec import union_schema
    from cdc_emitter.sink.plan import forget_layouts
    from cdc_emitter.spark.kafka import kafka_write_options
    from cdc_emitter.spark.schema import data_schema

    bootstrap = broker()
    version = args.packages_version or packages_version(pyspark.__version__)
    packages = f"org.apache.spark:spark-avro_2.13:{version},org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("cdc-emitter-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.jars.packages", packages)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    n = args.rows
    keys = min(n, args.keys or n)

    def cached_input(rows: int, keys: int, times: int | None):
        """``rows`` rows of the shape, row i of key ``i % keys`` (and time ``i % times``), cached."""
        columns = shape_columns(F.col("id") % F.lit(keys), args.shape)
        if times:
            columns.append((F.col("id") % F.lit(times)).alias("t"))
        out = spark.range(rows).select(*columns, F.lit(1).cast("long").alias("diff"))
        out = out.repartition(4).cache()
        out.count()
        return out

    df = cached_input(n, keys, args.times)
    data_cols = [c for c in df.columns if c not in ("diff", "t")]
    time_cols = ["t"] if args.times else []  # grouped on with the data: each time its own update
    avro_data = data_schema(df.select(*data_cols).schema)
    update_schema = json.dumps(union_schema(avro_data)[0]["items"])
    header = bytes([0, 0, 0, 0, 0, 0, 2])  # confluent framing (id 0) + union branch 0 + count 1
    if args.peer_writer == "sink":  # Spark's Kafka writer as the sink's JVM path sets it up
        kafka_opts = {
            k: v
            for k, v in kafka_write_options(bootstrap, "-", {}).items()
            if k not in ("topic", "includeHeaders")
        }
    else:  # an earlier round's peer: lz4, idempotent, Java's default batch
        kafka_opts = {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.compression.type": "lz4",
            "kafka.linger.ms": "20",
            "kafka.acks": "all",
            "kafka.enable.idempotence": "true",
        }

    def new_topic(name: str) -> str:
        topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
        ensure_topic(bootstrap, topic, create=True, partitions=args.partitions)
        return topic

    def messages(topic: str) -> int:
        return sum(high - low for low, high in end_offsets(bootstrap, topic).values())

    def update_struct(time_col, diff_col):
        return F.struct(
            F.struct(*[F.col(c) for c in data_cols]).alias("data"),
            time_col.alias("time"),
            diff_col.alias("diff"),
        )

    kept: dict = {}  # --same-sink, --restart: encoder -> [sink, its next batch's time]
    mode = {"time_column": "t"} if args.times else {}

    def sink_write(sink, df, t):
        if not args.times:
            return sink.write(df, time=t)
        # column mode: the batch's times shifted past the last batch's (the input stays cached)
        return sink.write(df.withColumn("t", F.col("t") + F.lit(t * args.times)))

    def run_sink(encoder: str, df):
        if (args.same_sink or args.restart) and df is not small:
            if encoder not in kept:  # the topic's first batch, untimed: the rounds follow it
                sink = CdcSink(bootstrap, new_topic(f"cdcsink-{encoder}"), encoder=encoder, **mode)
                sink_write(sink, df, 0)
                kept[encoder] = [sink, 1]
            sink, t = kept[encoder]
            kept[encoder][1] += 1
            if args.restart:  # a new process: only the topic tells it of the batch before
                forget_layouts()
                sink = CdcSink(bootstrap, sink.topic, encoder=encoder, **mode)
            before = messages(sink.topic)
            t0 = time.perf_counter()
            result = sink_write(sink, df, t)
            elapsed = time.perf_counter() - t0
            return elapsed, result.updates, messages(sink.topic) - before
        topic = new_topic(f"cdcsink-{encoder}")
        if args.cold:
            forget_layouts()
        sink = CdcSink(bootstrap, topic, encoder=encoder, **mode)
        t0 = time.perf_counter()
        result = sink_write(sink, df, 0)
        return time.perf_counter() - t0, result.updates, messages(topic)

    def run_diy(df):
        topic = new_topic("diy")
        t0 = time.perf_counter()
        consolidated = (
            df.groupBy(*data_cols, *time_cols).agg(F.sum("diff").alias("diff")).filter("diff != 0")
        )
        time_col = F.col("t").cast("long") if args.times else F.lit(0).cast("long")
        value = F.concat(
            F.lit(header),
            to_avro(update_struct(time_col, F.col("diff")), update_schema),
            F.lit(b"\x00"),
        )
        consolidated.select(value.alias("value")).write.format("kafka").options(
            **kafka_opts
        ).option("topic", topic).save()
        elapsed = time.perf_counter() - t0
        m = messages(topic)
        return elapsed, m, m

    def run_raw(df):
        topic = new_topic("raw")
        t0 = time.perf_counter()
        time_col = F.col("t").cast("long") if args.times else F.lit(0).cast("long")
        value = to_avro(update_struct(time_col, F.col("diff")), update_schema)
        df.select(value.alias("value")).write.format("kafka").options(**kafka_opts).option(
            "topic", topic
        ).save()
        elapsed = time.perf_counter() - t0
        m = messages(topic)
        return elapsed, m, m

    def run_floor(df):
        # what any correct sink pays: the consolidation, written nowhere (Spark's noop sink)
        t0 = time.perf_counter()
        df.groupBy(*data_cols, *time_cols).agg(F.sum("diff").alias("diff")).filter(
            "diff != 0"
        ).write.format("noop").mode("overwrite").save()
        # its updates: the distinct (data, time) pairs — row i's are (i % keys, i % times), equal for
        # rows the same modulo lcm(keys, times)
        return time.perf_counter() - t0, min(n, math.lcm(keys, args.times or 1)), 0

    plan = {
        "jvm": ("cdc-sink (jvm data path)", lambda d: run_sink("jvm", d)),
        "python": ("cdc-sink (python encoder)", lambda d: run_sink("python", d)),
        "diy": ("diy: consolidate + to_avro + kafka sink", run_diy),
        "raw": ("raw kafka sink, unconsolidated", run_raw),
        "floor": ("floor: the consolidation to the noop sink", run_floor),
    }
    chosen = args.only.split(",") if args.only else list(plan)
    unknown = [c for c in chosen if c not in plan]
    if unknown:
        ap.error(f"--only: unknown pipelines {unknown} (choose among {','.join(plan)})")
    rates = {}
    print(
        f"rows={n} keys={keys} times={args.times or 'one batch time'} shape={args.shape} "
        f"spark={pyspark.__version__} packages={version} broker={bootstrap} "
        f"topic partitions={args.partitions} sink={'one across rounds' if args.same_sink else 'new each round'} "
        f"peer writer={args.peer_writer}"
        f"{' (cold: the layout forgotten before each)' if args.cold else ''}"
        f"{' (restart: a new sink, the layout forgotten, on a written topic)' if args.restart else ''}"
    )
    # warm-up: every pipeline once on a small input (JIT, Python workers, producers, metadata),
    # whose rows repeat as the big input's do (its keys and times scaled down): the process learns
    # the layout, whether its rows repeat included, from it (the first 50,000 rows of the big
    # input, whose copies of a row are far apart, would say that they do not)
    warm = min(n, 50_000)
    small = cached_input(
        warm, max(1, keys * warm // n), max(1, args.times * warm // n) if args.times else None
    )
    for key in chosen:
        plan[key][1](small)
    # rounds, each pipeline once per round: a pipeline timed first would otherwise also pay the
    # JIT's compilation of the big-input code paths that the others then find compiled
    rounds: list[dict] = []  # each round's (seconds, updates, messages) per pipeline
    for round_ in range(1, max(1, args.repeat) + 1):
        rounds.append({})
        for key in chosen:
            rounds[-1][key] = plan[key][1](df)
            print(
                f"  round {round_} {key:6s} {rounds[-1][key][0]:6.2f}s", file=sys.stderr, flush=True
            )
    for key in chosen:
        elapsed, updates, msgs = min(r[key] for r in rounds)  # the fastest round
        rates[key] = n / elapsed  # input rows: the same for every pipeline
        print(
            f"{plan[key][0]:45s} {updates:>10d} updates {msgs:>9d} messages {elapsed:8.2f}s "
            f"{rates[key]:>12,.0f} rows/s",
            flush=True,
        )
    targets = {"diy": 1.5, "floor": 0.6}  # issue 11's targets for the JVM path; raw: reference
    ratios = []
    for ours in ("jvm", "python"):
        for peer in ("diy", "raw", "floor"):
            if ours in rates and peer in rates:
                line = f"ratio {ours}/{peer}: {rates[ours] / rates[peer]:.2f}x"
                # the same ratio within each round: how much the best hides
                within = [r[peer][0] / r[ours][0] for r in rounds]
                if len(rounds) > 1:
                    line += (
                        f" (round by round: min {min(within):.2f}x, median "
                        f"{statistics.median(within):.2f}x, max {max(within):.2f}x)"
                    )
                print(line)
                ratios.append(
                    ratio(
                        f"{ours}/{peer}",
                        plan[ours][0],
                        plan[peer][0],
                        within,
                        target=targets.get(peer) if ours == "jvm" else None,
                        meaning="speed: input rows/s of ours over the peer's, in the same round",
                        best_round=rates[ours] / rates[peer],
                    )
                )
    write_json(
        args.json,
        "sink",
        {
            "rows": n,
            "keys": keys,
            "times": args.times,
            "shape": args.shape,
            "topic_partitions": args.partitions,
            "shuffle_partitions": args.shuffle_partitions,
            "pipelines": chosen,
            "rounds": len(rounds),
            "same_sink": args.same_sink,
            "cold": args.cold,
            "restart": args.restart,
            "peer_writer": args.peer_writer,
            "spark_packages": version,
        },
        [
            {
                key: {"seconds": r[key][0], "updates": r[key][1], "messages": r[key][2]}
                for key in chosen
            }
            for r in rounds
        ],
        ratios,
        best_round_rows_per_second=rates,
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
