#!/usr/bin/env python3
"""Benchmark of the verifying consumer.

1. Throughput: one topic of ``--updates`` updates over ``--partitions`` partitions, written by
   ``CdcSink`` from a local Spark session (``--batches`` batches, one CDC time each; or, with
   ``--writer producer``, hand-made messages of ``--batch`` updates through CdcProducer). It is
   then read back ``--runs`` times, the readers interleaved in each run:

   * **plain**: a single-process consume-and-decode loop (confluent-kafka + fastavro, no dedup,
     no reader) — the floor any consumer pays;
   * **verify**: :func:`cdc_emitter.read.verify.verify_topic` with its defaults (decode workers on a
     machine with two cores or more), no collection (``cdc-emitter verify``);
   * **verify --output**: the same, keeping the collection at the frontier.

   It prints each rate in updates/s and the ratios to plain, per run and as min / median / max
   (goals: verify >= 1.8x on two cores or more, verify --output >= 0.8x). ``--shapes
   kv,wide,nested`` does it for each of benchkit's row shapes, a topic each.
2. Memory: the reader's peak traced memory (tracemalloc) for ``--memory`` update totals pushed
   directly to :class:`~cdc_emitter.protocol.reader.CdcReader` with an advancing frontier (goal: flat),
   and what strict mode keeps per million updates (exact: traced; bloom: the filters' bytes).

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` (its
own state dir, stopped at the end). ``--profile`` prints where verify spends its time; ``--json
FILE`` writes the parameters, each run's rates and the ratios run by run to FILE.

    .venv/bin/python benchmarks/bench_verify.py                  # 2M updates by CdcSink, 3 runs
    .venv/bin/python benchmarks/bench_verify.py --updates 500000 --runs 1 --memory 1000000 --profile
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import statistics
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchkit import SHAPES, kafka, ratio, shape_columns, write_json  # noqa: E402

from cdc_emitter.kafka import CdcProducer, end_offsets, ensure_topic  # noqa: E402
from cdc_emitter.protocol import CdcReader, Progress, Update  # noqa: E402
from cdc_emitter.protocol.codec import CdcCodec  # noqa: E402
from cdc_emitter.read.verify import verify_topic  # noqa: E402

DATA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": "string"}],
}


def write_topic(
    bootstrap: str,
    topic: str,
    codec: CdcCodec,
    updates: int,
    batch: int,
    per_time: int,
    partitions: int,
) -> int:
    """Write the topic; returns the final frontier (the last upper)."""
    ensure_topic(bootstrap, topic, create=True, partitions=partitions)
    t0 = time.perf_counter()
    written = 0
    n_time = 0
    with CdcProducer(bootstrap, topic) as producer:
        part = 0
        while written < updates:
            size = min(per_time, updates - written)
            at_time = 0
            while at_time < size:
                n = min(batch, size - at_time)
                ups = [
                    Update((written + at_time + i, f"value-{written + at_time + i}"), n_time, 1)
                    for i in range(n)
                ]
                for value in codec.encode_updates(ups):
                    producer.produce(value, partition=part)
                    part = (part + 1) % partitions
                at_time += n
            producer.produce(
                codec.encode_progress(Progress((n_time,), (n_time + 1,), ((n_time, size),))),
                partition=part,
            )
            written += size
            n_time += 1
    print(
        f"wrote {written:,} updates at {n_time} times to {topic} "
        f"in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    return n_time


def write_topic_with_sink(
    bootstrap: str, topic: str, updates: int, batches: int, partitions: int, shape: str = "kv"
) -> tuple[int, dict]:
    """Write the topic with CdcSink (one ``write`` per batch) in rows of ``shape`` (``kv``:
    ``(k long, v string)``, every ``v`` distinct; ``wide`` and ``nested``: benchkit's shapes);
    returns (frontier, data schema)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from cdc_emitter import CdcSink
    from cdc_emitter.spark.schema import data_schema

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-verify")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ensure_topic(bootstrap, topic, create=True, partitions=partitions)
    sink = CdcSink(bootstrap, topic)
    per = -(-updates // batches)
    t0 = time.perf_counter()
    schema = None
    for b in range(batches):
        lo, hi = b * per, min(updates, (b + 1) * per)
        if shape == "kv":
            df = spark.range(lo, hi).selectExpr("id AS k", "concat('value-', id) AS v")
        else:
            df = spark.range(lo, hi).select(*shape_columns(F.col("id"), shape))
        schema = schema or data_schema(df.schema)
        sink.write(df, time=b)
    print(
        f"CdcSink wrote {updates:,} updates in {batches} batches to {topic} "
        f"({partitions} partitions) in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    spark.stop()
    return batches, schema


def plain_loop(bootstrap: str, topic: str, codec: CdcCodec) -> tuple[int, float]:
    """Consume every message and decode it with fastavro; no dedup. Returns (updates, seconds)."""
    import fastavro
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    marks = end_offsets(bootstrap, topic)
    parsed = fastavro.parse_schema(codec.union)
    reader = fastavro.schemaless_reader
    skip = 5  # Confluent header
    t0 = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in marks])
    pending = {p for p, (low, high) in marks.items() if high > low}
    updates = 0
    while pending:
        for msg in consumer.consume(500, 0) or consumer.consume(1, 1.0):
            if msg.error() is not None:
                if msg.offset() >= marks[msg.partition()][1]:
                    pending.discard(msg.partition())
                continue
            value = msg.value()
            datum = reader(io.BytesIO(value[skip:]), parsed, return_record_name=True)
            if isinstance(datum, list):
                updates += len(datum)
            if msg.offset() >= marks[msg.partition()][1] - 1:
                pending.discard(msg.partition())
    consumer.close()
    return updates, time.perf_counter() - t0


def run_verify(
    bootstrap: str,
    topic: str,
    codec: CdcCodec,
    frontier: int,
    keep_collection: bool,
    workers: int | None = None,
):
    t0 = time.perf_counter()
    result = verify_topic(
        bootstrap, topic, codec, timeout=600, keep_collection=keep_collection, workers=workers
    )
    seconds = time.perf_counter() - t0
    assert result.ok and result.frontier == (frontier,), (result.verdict, result.violations[:3])
    return result, seconds


def reader_memory(total: int, batch: int = 1000, per_time: int = 10_000) -> tuple[int, int, float]:
    """Peak traced memory of a CdcReader fed ``total`` updates with an advancing frontier."""
    gc.collect()
    tracemalloc.start()
    reader = CdcReader()
    t0 = time.perf_counter()
    pushed = 0
    at = 0
    reported = 0
    while pushed < total:
        size = min(per_time, total - pushed)
        done = 0
        while done < size:
            n = min(batch, size - done)
            base = pushed + done
            for finished, _f in reader.push([Update((base + i, "v"), at, 1) for i in range(n)]):
                reported += len(finished)
            done += n
        for finished, _f in reader.push(Progress((at,), (at + 1,), ((at, size),))):
            reported += len(finished)
        pushed += size
        at += 1
    seconds = time.perf_counter() - t0
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert reported == total and reader.frontier == (at,), (reported, reader.frontier)
    return peak, reader.retained(), seconds


def strict_memory(total: int, mode: str) -> float:
    """Bytes strict mode keeps per reported update (exact: traced; bloom: the filters' bits)."""
    gc.collect()
    tracemalloc.start()
    reader = CdcReader(strict=mode)
    per_time = 10_000
    for at in range(total // per_time):
        reader.push(
            [
                Update((at * per_time + i, f"value-{at * per_time + i}"), at, 1)
                for i in range(per_time)
            ]
        )
        reader.push(Progress((at,), (at + 1,), ((at, per_time),)))
    current, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if mode == "bloom":
        current += reader._memory.nbytes  # Rust allocations: not traced
    return current / total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=2_000_000)
    ap.add_argument("--writer", choices=["sink", "producer"], default="sink")
    ap.add_argument(
        "--shapes",
        default="kv",
        help=f"row shapes written by the sink, comma-separated: {', '.join(SHAPES)} (a topic "
        "each; the producer writes kv)",
    )
    ap.add_argument("--batches", type=int, default=20, help="CdcSink batches (CDC times)")
    ap.add_argument("--batch", type=int, default=1000, help="updates per message (producer)")
    ap.add_argument("--per-time", type=int, default=100_000, help="updates per CDC time (producer)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--workers", type=int, default=None, help="verify's decode workers (default: auto)"
    )
    ap.add_argument("--memory", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument(
        "--strict-memory",
        type=int,
        default=1_000_000,
        help="updates for the strict-mode memory figures (0: skip)",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile one verify run")
    ap.add_argument("--skip-kafka", action="store_true", help="only the memory measurements")
    ap.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help="also write the results (each run's rates, the ratios run by run, the memory "
        "figures) to FILE",
    )
    args = ap.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown or not shapes:
        ap.error(f"--shapes takes {', '.join(SHAPES)}, got {args.shapes!r}")
    if args.writer == "producer":
        shapes = ["kv"]
    runs: list[dict] = []
    ratios: dict[str, list[float]] = {}
    if not args.skip_kafka:
        with kafka() as bootstrap:
            for shape in shapes:
                read_shape(args, bootstrap, shape, runs, ratios)
    memory = memory_figures(args)
    plain = "plain consume + fastavro decode loop (one process, no dedup, no checks)"
    meaning = "speed: updates/s of ours over the plain loop's, in the same run"
    results = []
    for name, values in ratios.items():
        output = name.startswith("verify --output")
        results.append(
            ratio(
                name.replace(" (", "/plain (") if " (" in name else f"{name}/plain",
                "verify --output (also keeps the collection at the frontier)"
                if output
                else "verify (dedup, every statement checked, counts)",
                plain,
                values,
                target=0.8 if output else 1.8,
                meaning=meaning,
            )
        )
    write_json(
        args.json,
        "verify",
        {
            "updates": args.updates,
            "writer": args.writer,
            "shapes": shapes,
            "batches": args.batches,
            "partitions": args.partitions,
            "rounds": len(runs) // max(1, len(shapes)),
            "workers": args.workers,
        },
        runs,
        results,
        memory=memory,
    )
    return 0


def read_shape(
    args: argparse.Namespace, bootstrap: str, shape: str, runs: list, ratios: dict
) -> None:
    """Write one topic of ``shape`` and read it back ``--runs`` times, each reader in turn."""
    label = "" if shape == "kv" else f" ({shape})"
    mine = ratios.setdefault(f"verify{label}", [])
    mine_output = ratios.setdefault(f"verify --output{label}", [])
    topic = f"bench-verify-{uuid.uuid4().hex[:8]}"
    if args.writer == "sink":
        frontier, schema = write_topic_with_sink(
            bootstrap, topic, args.updates, args.batches, args.partitions, shape
        )
        codec = CdcCodec(schema)
    else:
        codec = CdcCodec(DATA)
        frontier = write_topic(
            bootstrap, topic, codec, args.updates, args.batch, args.per_time, args.partitions
        )
    plain_loop(bootstrap, topic, codec)  # warm the broker's page cache
    for run in range(1, args.runs + 1):
        n, plain_s = plain_loop(bootstrap, topic, codec)
        assert n == args.updates, n
        res, verify_s = run_verify(bootstrap, topic, codec, frontier, False, args.workers)
        res_c, verify_c_s = run_verify(bootstrap, topic, codec, frontier, True, args.workers)
        assert len(res_c.collection) == args.updates
        del res_c
        plain_rate = n / plain_s
        v_rate, vc_rate = res.updates / verify_s, args.updates / verify_c_s
        mine.append(v_rate / plain_rate)
        mine_output.append(vc_rate / plain_rate)
        runs.append(
            {
                "shape": shape,
                "plain_updates_per_second": plain_rate,
                "verify_updates_per_second": v_rate,
                "verify_output_updates_per_second": vc_rate,
                "verify_workers": res.workers,
            }
        )
        print(
            f"{shape} run {run}: plain consume+decode {plain_rate:12,.0f} updates/s "
            f"({plain_s:.2f}s) | verify {v_rate:12,.0f} ({verify_s:.2f}s, {res.workers} "
            f"workers) {v_rate / plain_rate:.2f}x | verify --output {vc_rate:12,.0f} "
            f"({verify_c_s:.2f}s) {vc_rate / plain_rate:.2f}x",
            flush=True,
        )
    for name, values in ((f"verify{label}", mine), (f"verify --output{label}", mine_output)):
        print(
            f"{name:>24} / plain: min {min(values):.2f}x  median "
            f"{statistics.median(values):.2f}x  max {max(values):.2f}x  ({len(values)} runs)"
        )
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        run_verify(bootstrap, topic, codec, frontier, False, args.workers)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def memory_figures(args: argparse.Namespace) -> dict:
    """The reader's peak memory for each ``--memory`` total, and strict mode's bytes."""
    memory: dict = {}
    for total in args.memory:
        peak, retained, seconds = reader_memory(total)
        memory[f"reader_peak_mib_{total}"] = peak / 2**20
        print(
            f"CdcReader, {total:>11,} updates, advancing frontier: peak {peak / 2**20:7.1f} MiB"
            f" traced, {retained} items retained at the end ({seconds:.1f}s under tracemalloc)",
            flush=True,
        )
    if args.strict_memory:
        for mode in ("exact", "bloom"):
            per = strict_memory(args.strict_memory, mode)
            memory[f"strict_{mode}_mib_per_million"] = per * 1e6 / 2**20
            print(
                f"strict={mode}: {per * 1e6 / 2**20:7.1f} MiB per million reported updates "
                f"(measured over {args.strict_memory:,})",
                flush=True,
            )
    return memory


if __name__ == "__main__":
    sys.exit(main())
