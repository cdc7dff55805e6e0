#!/usr/bin/env python3
"""Benchmark of the verifying consumer.

1. Throughput: writes one topic of ``--updates`` updates (``--batch`` updates per message, one
   time per ``--per-time`` updates, a progress statement per time) with CdcProducer and the codec,
   then reads it back twice on the same machine:

   * **plain**: a consume-and-decode loop (confluent-kafka + fastavro, no dedup, no reader) —
     the floor any consumer pays;
   * **verify**: :func:`cdc_emitter.verify.verify_topic` to the final frontier (dedup, progress
     chain, counts, collection at the frontier).

   It prints both rates in updates/s and their ratio (goal: verify >= 0.8 x plain).
2. Memory: the reader's peak traced memory (tracemalloc) for ``--memory`` update totals pushed
   directly to :class:`~cdc_emitter.core.CdcReader` with an advancing frontier (goal: flat).

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` (its
own state dir, stopped at the end). ``--profile`` prints where verify spends its time.

    .venv/bin/python scripts/bench_verify.py                       # 2M updates, memory 1M and 10M
    .venv/bin/python scripts/bench_verify.py --updates 500000 --memory 1000000 --profile
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cdc_emitter.codec import CdcCodec  # noqa: E402
from cdc_emitter.core import CdcReader, Progress, Update  # noqa: E402
from cdc_emitter.kafka_io import CdcProducer, ensure_topic, end_offsets  # noqa: E402
from cdc_emitter.verify import verify_topic  # noqa: E402

DATA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": "string"}],
}


def start_broker() -> tuple[str, dict | None]:
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if env:
        return env, None
    home = tempfile.mkdtemp(prefix="cdc-bench-kafka-")
    benv = dict(os.environ, CDC_KAFKA_HOME=home)
    out = subprocess.run([str(ROOT / "scripts" / "kafka-local"), "start"], env=benv,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1], benv


def write_topic(bootstrap: str, topic: str, codec: CdcCodec, updates: int, batch: int,
                per_time: int, partitions: int) -> int:
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
                ups = [Update((written + at_time + i, f"value-{written + at_time + i}"), n_time, 1)
                       for i in range(n)]
                for value in codec.encode_updates(ups):
                    producer.produce(value, partition=part)
                    part = (part + 1) % partitions
                at_time += n
            producer.produce(codec.encode_progress(Progress((n_time,), (n_time + 1,),
                                                            ((n_time, size),))),
                             partition=part)
            written += size
            n_time += 1
    print(f"wrote {written:,} updates at {n_time} times to {topic} "
          f"in {time.perf_counter() - t0:.1f}s", flush=True)
    return n_time


def plain_loop(bootstrap: str, topic: str, codec: CdcCodec) -> tuple[int, float]:
    """Consume every message and decode it with fastavro; no dedup. Returns (updates, seconds)."""
    import fastavro
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    marks = end_offsets(bootstrap, topic)
    parsed = fastavro.parse_schema(codec.union)
    reader = fastavro.schemaless_reader
    skip = 5  # Confluent header
    t0 = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
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


def run_verify(bootstrap: str, topic: str, codec: CdcCodec, frontier: int, keep_collection: bool):
    t0 = time.perf_counter()
    result = verify_topic(bootstrap, topic, codec, until_frontier=frontier, timeout=600,
                          keep_collection=keep_collection)
    seconds = time.perf_counter() - t0
    assert result.reached and not result.violations, (result.frontier, result.violations[:3])
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=1000, help="updates per message")
    ap.add_argument("--per-time", type=int, default=100_000, help="updates per CDC time")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--memory", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument("--profile", action="store_true", help="cProfile one verify run")
    ap.add_argument("--skip-kafka", action="store_true", help="only the memory measurement")
    args = ap.parse_args()

    if not args.skip_kafka:
        bootstrap, benv = start_broker()
        try:
            codec = CdcCodec(DATA)
            topic = f"bench-verify-{uuid.uuid4().hex[:8]}"
            frontier = write_topic(bootstrap, topic, codec, args.updates, args.batch,
                                   args.per_time, args.partitions)
            plain_loop(bootstrap, topic, codec)  # warm the broker's page cache
            n, plain_s = plain_loop(bootstrap, topic, codec)
            assert n == args.updates, n
            res, verify_s = run_verify(bootstrap, topic, codec, frontier, keep_collection=False)
            res_c, verify_c_s = run_verify(bootstrap, topic, codec, frontier, keep_collection=True)
            assert len(res_c.collection) == args.updates
            del res_c
            plain_rate = n / plain_s
            v_rate = res.updates / verify_s
            vc_rate = args.updates / verify_c_s
            print(f"plain consume+decode (confluent-kafka + fastavro): {plain_rate:12,.0f} updates/s"
                  f"  ({plain_s:.2f}s)")
            print(f"verify_topic (CLI verify, no --output):           {v_rate:12,.0f} updates/s"
                  f"  ({verify_s:.2f}s)  ratio {v_rate / plain_rate:.2f}")
            print(f"verify_topic + collection (--output):             {vc_rate:12,.0f} updates/s"
                  f"  ({verify_c_s:.2f}s)  ratio {vc_rate / plain_rate:.2f}")
            if args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.enable()
                run_verify(bootstrap, topic, codec, frontier, keep_collection=False)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)
                print("plain loop profile:")
                prof = cProfile.Profile()
                prof.enable()
                plain_loop(bootstrap, topic, codec)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(6)
        finally:
            if benv is not None:
                subprocess.run([str(ROOT / "scripts" / "kafka-local"), "stop"], env=benv,
                               capture_output=True)

    for total in args.memory:
        peak, retained, seconds = reader_memory(total)
        print(f"CdcReader, {total:>11,} updates, advancing frontier: peak {peak / 2**20:7.1f} MiB"
              f" traced, {retained} items retained at the end ({seconds:.1f}s under tracemalloc)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
