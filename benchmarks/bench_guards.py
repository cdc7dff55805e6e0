#!/usr/bin/env python3
"""What the sink's guards cost per batch: reads of the topic's tail and of partition 0's end.

A sink reads the tail once to learn the frontier and then carries it from batch to batch while
partition 0 has not moved (one end-offset request); the two-writer check reads partition 0's end
offset twice more per batch (before the batch's first message and before its progress
statement), and the whole tail again only when partition 0 moved. This prints the time of each
kind of read on a topic of ``--statements`` batches of ``--updates`` updates over
``--partitions`` partitions (min / median / max over ``--reads`` reads): the tail through the
sink's kept client, one end offset through a new client (as the sink did before it kept one),
and one end offset through the kept client (what the sink pays now).

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` (its
own state dir, stopped at the end).

    .venv/bin/python scripts/bench_guards.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchkit import kafka  # noqa: E402

from cdc_emitter import CdcSink  # noqa: E402
from cdc_emitter.kafka import CdcProducer, TopicOffsets, ensure_topic, partition_end  # noqa: E402
from cdc_emitter.protocol import Progress, Update  # noqa: E402
from cdc_emitter.protocol.codec import CdcCodec  # noqa: E402
from cdc_emitter.protocol.headers import HEADER_KIND, HEADER_LOWER, HEADER_UPPER, HEADER_WRITER  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--statements", type=int, default=200)
    ap.add_argument("--updates", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--reads", type=int, default=30)
    args = ap.parse_args()
    with kafka() as bootstrap:
        topic = f"bench-guards-{uuid.uuid4().hex[:8]}"
        ensure_topic(bootstrap, topic, create=True, partitions=args.partitions)
        codec = CdcCodec(
            {"type": "record", "name": "data", "fields": [{"name": "k", "type": "long"}]}
        )
        updates = [(HEADER_KIND, b"updates"), (HEADER_WRITER, b"bench")]
        with CdcProducer(bootstrap, topic) as producer:  # messages as CdcSink writes them
            for t in range(args.statements):
                for i, value in enumerate(
                    codec.encode_updates([Update((k,), t, 1) for k in range(args.updates)])
                ):
                    producer.produce(value, headers=updates, partition=(t + i) % args.partitions)
                producer.produce(
                    codec.encode_progress(Progress((t,), (t + 1,), ((t, args.updates),))),
                    headers=[
                        (HEADER_KIND, b"progress"),
                        (HEADER_WRITER, b"bench"),
                        (HEADER_LOWER, str(t).encode()),
                        (HEADER_UPPER, str(t + 1).encode()),
                    ],
                    partition=0,
                )
        sink = CdcSink(bootstrap, topic)
        sink.frontier()  # warm: metadata, connections
        seconds = []
        for _ in range(args.reads):
            began = time.perf_counter()
            assert sink.frontier().frontier == args.statements
            seconds.append(time.perf_counter() - began)
        ends = []
        for _ in range(args.reads):
            began = time.perf_counter()
            partition_end(bootstrap, topic, 0)
            ends.append(time.perf_counter() - began)
        kept = []
        with TopicOffsets(bootstrap, topic) as offsets:
            offsets.end(0)  # warm: metadata, connections
            for _ in range(args.reads):
                began = time.perf_counter()
                offsets.end(0)
                kept.append(time.perf_counter() - began)

        def figures(values: list) -> str:
            return (
                f"min {min(values):.4f}s median {statistics.median(values):.4f}s "
                f"max {max(values):.4f}s"
            )

        print(
            f"topic of {args.statements} batches x {args.updates} updates, {args.partitions} "
            f"partitions, {args.reads} reads each:\n"
            f"  its tail (CdcSink.frontier)                  {figures(seconds)}\n"
            f"  partition 0's end offset, a new client      {figures(ends)}\n"
            f"  partition 0's end offset, the kept client   {figures(kept)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
