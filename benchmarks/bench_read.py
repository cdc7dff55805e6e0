#!/usr/bin/env python3
"""The readers on one topic: the local verifier (``verify_topic``), Spark (``read_cdc``), and
with ``--engines`` the ``cdcv2`` streaming source (a streaming query until it has read all).

Writes ``--updates`` distinct narrow updates ``(k long, v string)`` in ``--batches`` batches over
``--partitions`` partitions with ``CdcSink`` (one CDC time per batch), then reads the topic back
with each engine in a process of its own, ``--runs`` times, interleaved, and prints for each run:
seconds, updates per second, and the peak resident memory of the reading Python process (for
Spark: the driver's Python process; the JVM runs the executors too in ``local[2]`` and is not
counted; 8 shuffle partitions; for ``stream``: the driver's, not the Python process Spark runs
the source in). Each run checks the frontier and that nothing is left unproven.

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` (its
own state dir, stopped at the end).

    .venv/bin/python benchmarks/bench_read.py --updates 2000000 --partitions 8 \
        --engines local,spark,stream --runs 3

The engines ``cluster-1`` and ``cluster-2`` run ``read_cdc`` on a standalone cluster from
``scripts/spark-local`` with one and with two workers of one core each (an executor of one core
and 2 GiB on each; the driver apart, in the reading process), started before and stopped after
each run: how the read scales with executors, as far as the machine's cores let it show.

With ``--json FILE`` it writes each run's seconds and, run by run, the speed of ``read_cdc`` over
the local verifier's (issue 57's target: at least 0.8), of the ``cdcv2`` source over
``read_cdc``'s (issue 58's: at least 1.0), and of two workers over one, for the engines it ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchkit  # noqa: E402
from benchkit import kafka, local_spark  # noqa: E402

DATA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": ["null", "string"]}],
}

#: Run in a process of its own: read the topic, print seconds, updates and peak RSS as JSON.
READER = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
engine, bootstrap, topic, data = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if engine == "local":
    from cdc_emitter.protocol.codec import CdcCodec
    from cdc_emitter.read.verify import verify_topic
    began = time.perf_counter()
    result = verify_topic(bootstrap, topic, CdcCodec(data), keep_collection=False)
    seconds = time.perf_counter() - began
    out = {{"frontier": list(result.frontier), "verdict": result.verdict, "updates": result.updates}}
elif engine == "stream":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from cdc_emitter import configure_spark, register
    spark = (configure_spark(SparkSession.builder.master("local[2]").appName("bench-stream"))
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.range(1).count()  # the session is up before the clock starts
    counts, times = [], []
    from pyspark.sql import functions as F
    def batch(df, _id):
        row = df.agg(F.max("time"), F.count("*")).first()
        counts.append(row[1] if row is not None else 0)
        times.append(row[0] if row is not None and row[0] is not None else -1)
    began = time.perf_counter()
    query = (spark.readStream.format("cdcv2").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", topic).load().writeStream.foreachBatch(batch)
             .option("checkpointLocation", os.path.join(os.environ.get("TMPDIR", "/tmp"),
                     "bench-stream-" + str(os.getpid()))).start())
    query.processAllAvailable()
    seconds = time.perf_counter() - began
    query.stop()
    # a violation would have failed the query (and this process): reaching here is the verdict
    out = {{"frontier": [max(times) + 1], "verdict": "verified", "updates": sum(counts),
            "batches": len([c for c in counts if c])}}
    spark.stop()
else:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from cdc_emitter import configure_spark, read_cdc
    master = sys.argv[5] if len(sys.argv) > 5 else "local[2]"
    builder = SparkSession.builder.master(master).appName("bench-read")
    if master.startswith("spark://"):  # one executor of one core per worker; the driver apart
        builder = (builder.config("spark.executor.cores", "1").config("spark.executor.memory", "2g")
                   .config("spark.driver.memory", "2g"))
    else:
        builder = builder.config("spark.driver.memory", "4g")
    spark = (configure_spark(builder).config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()  # the session is up before the clock starts
    began = time.perf_counter()
    result = read_cdc(spark, bootstrap_servers=bootstrap, topic=topic, schema=data)
    rows = result.collection.count()  # the collection computed too, on the executors
    seconds = time.perf_counter() - began
    out = {{"frontier": list(result.frontier), "verdict": result.verdict, "updates": result.updates,
            "collection": rows}}
    spark.stop()
out["seconds"] = seconds
def peak_rss_mib():
    # VmHWM starts again at exec; ru_maxrss keeps the forking parent's peak (Linux)
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["peak_rss_mib"] = peak_rss_mib()
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=2_000_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument(
        "--engines",
        default="local,spark",
        help="comma-separated: local (verify_topic), spark (read_cdc), stream (the cdcv2 "
        "streaming source, PySpark 4: every complete time through a streaming query), "
        "cluster-1 and cluster-2 (read_cdc on a standalone cluster of one or two one-core "
        "workers from scripts/spark-local)",
    )
    args = ap.parse_args()
    from pyspark.sql import functions as F

    from cdc_emitter import CdcSink
    from cdc_emitter.kafka import ensure_topic

    with kafka() as bootstrap:
        topic = f"bench-read-{uuid.uuid4().hex[:8]}"
        ensure_topic(bootstrap, topic, create=True, partitions=args.partitions)
        spark = local_spark("bench-read-write", {"spark.driver.memory": "4g"})
        per_batch = args.updates // args.batches
        began = time.perf_counter()
        sink = CdcSink(bootstrap, topic)
        for b in range(args.batches):
            rows = spark.range(b * per_batch, (b + 1) * per_batch).select(
                F.col("id").alias("k"),
                F.concat(F.lit("value-"), (F.col("id") % 1000).cast("string")).alias("v"),
            )
            sink.write(rows, time=b)
        print(
            f"wrote {per_batch * args.batches} updates in {args.batches} batches over {args.partitions} "
            f"partitions in {time.perf_counter() - began:.1f}s",
            flush=True,
        )
        spark.stop()
        script = READER.format(root=str(ROOT))
        rounds: list[dict] = []
        for run in range(1, args.runs + 1):
            for engine in args.engines.split(","):
                with cluster(engine) as master:
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            script,
                            "spark" if master else engine,
                            bootstrap,
                            topic,
                            json.dumps(DATA),
                            *([master] if master else []),
                        ],
                        capture_output=True,
                        text=True,
                    )
                if done.returncode != 0:
                    print(done.stderr[-3000:], file=sys.stderr)
                    return 1
                out = json.loads(done.stdout.strip().splitlines()[-1])
                assert out["frontier"] == [args.batches] and out["verdict"] == "verified", out
                rounds.append({"run": run, "engine": engine, **out})
                print(
                    f"run {run} {engine:9s} {out['seconds']:7.1f}s "
                    f"{per_batch * args.batches / out['seconds']:>10,.0f} updates/s  "
                    f"peak RSS of the reading Python process {out['peak_rss_mib']:,.0f} MiB",
                    flush=True,
                )
    seconds: dict[str, list[float]] = {}
    for r in rounds:
        seconds.setdefault(r["engine"], []).append(r["seconds"])
    ratios = []
    for ours, peer, target, issue in (
        ("spark", "local", 0.8, 57),
        ("stream", "spark", 1.0, 58),
        ("cluster-2", "cluster-1", None, 57),
    ):
        if ours in seconds and peer in seconds:
            ratios.append(
                benchkit.ratio(
                    f"{ours}/{peer}",
                    ENGINES[ours],
                    ENGINES[peer],
                    [p / o for o, p in zip(seconds[ours], seconds[peer])],
                    target=target,
                    meaning=f"updates/s of {ours} over {peer}'s, same run (issue {issue})",
                )
            )
    benchkit.write_json(args.json, "read", vars(args), rounds, ratios)
    return 0


#: What each engine is, as the results name it.
ENGINES = {
    "local": "verify_topic (the local verifier, collection not kept)",
    "spark": "read_cdc (Spark local[2], the collection counted)",
    "stream": "the cdcv2 streaming source (Spark local[2], every complete time)",
    "cluster-1": "read_cdc on a standalone cluster of one worker (1 core), the collection counted",
    "cluster-2": "read_cdc on a standalone cluster of two workers (1 core each), the collection counted",
}


@contextlib.contextmanager
def cluster(engine: str) -> Iterator[str | None]:
    """For ``cluster-N``: a standalone cluster of N one-core workers from ``scripts/spark-local``
    (a state dir of its own), its master's URL, stopped afterwards; else None."""
    if not engine.startswith("cluster-"):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="bench-read-cluster-") as home:
        env = {
            **os.environ,
            "CDC_SPARK_HOME": home,
            "CDC_SPARK_WORKERS": engine.split("-", 1)[1],
            "CDC_SPARK_WORKER_CORES": "1",
            "CDC_SPARK_WORKER_MEMORY": "2g",
            "CDC_SPARK_PYTHON": sys.executable,
        }
        local = str(ROOT / "scripts" / "spark-local")
        try:  # stopped in any case: a start that failed half-way leaves processes running
            started = subprocess.run(
                [local, "start"], env=env, capture_output=True, text=True, check=False
            )
            if started.returncode != 0:
                raise SystemExit(f"scripts/spark-local start failed:\n{started.stderr[-2000:]}")
            yield started.stdout.split()[-1]
        finally:
            subprocess.run([local, "stop"], env=env, capture_output=True, check=False)


if __name__ == "__main__":
    sys.exit(main())
