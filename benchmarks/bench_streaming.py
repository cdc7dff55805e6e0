#!/usr/bin/env python3
"""A streaming query's micro-batches through CdcSink against Spark's own Kafka sink: the
``rate`` source at ``--rows-per-second``, a processing-time trigger of ``--trigger`` seconds, in
one local[2] Spark session.

Each round runs the queries one after the other (their order turns round by round), each on a
topic and a checkpoint of its own, for ``--warmup`` batches and then ``--batches`` measured ones
(after ``--warmup-rounds`` rounds that are not reported):

* ``sink``: ``CdcSink`` as the ``foreachBatch`` function, with the query's checkpoint location
  (its sink log): one interval of CDC time per micro-batch;
* ``peer``: ``to_avro`` of the same columns and ``writeStream.format("kafka")`` (Spark's defaults);
* ``foreach`` (reported, no target): the peer's own work done in a ``foreachBatch`` function
  (``to_avro`` and ``write.format("kafka")`` of the micro-batch) — what any ``foreachBatch``
  sink pays over a sink inside the query's plan: Python called back, the batch analysed again,
  a job of its own.

Two ratios per round against the peer, ours over the peer's (lower is better), and the same two
against ``foreach``:

* ``batch``: the median ``triggerExecution`` of the measured batches (Spark's progress reports);
* ``latency``: the median, over the rows of the measured batches, of the time from the start
  of the row's micro-batch (the progress report's ``timestamp``) to the moment a consumer in
  another process has the row. For the peer, that is when the consumer reads the row's record:
  the row is merely visible. For ours, it is when the consumer (`TopicFollower`) proves the row's
  time complete: the time's progress statement has been read, and every update of the time
  before it. (Not from the rate source's ``timestamp``: how long a row waits for its batch
  depends on where the trigger falls in the source's second, which differs run by run.)

The rows: ``k`` (the rate source's ``value``, distinct), ``ts`` (its ``timestamp``), and the
columns of ``--shape`` made from ``k`` (as ``bench_sink.py``'s).

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local``.

    .venv/bin/python benchmarks/bench_streaming.py --rounds 3 --batches 20
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import json
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import SHAPES, kafka, local_spark, ratio, shape_columns, write_json  # noqa: E402

#: Seconds a consumer is given, after its query stopped, to read what the query wrote.
DRAIN_SECONDS = 5.0


def _epoch(iso: str) -> float:
    """Spark's progress timestamp (``2026-01-01T00:00:00.000Z``) in epoch seconds."""
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def consume(kind: str, servers: str, topic: str, record: str, ready, stop, out) -> None:
    """A consumer process: reads ``topic`` from its start until ``stop`` is set, then puts
    ``(k, ts, seen)`` of every row it had, in epoch seconds, on ``out``. ``kind`` ``"sink"``:
    a row is had when `TopicFollower` hands out its time (proven complete); ``"peer"``: when
    its record is read."""
    seen: list[tuple[int, float, float]] = []
    if kind == "sink":
        from cdc_emitter.protocol.codec import CdcCodec
        from cdc_emitter.read.follow import TopicFollower

        with TopicFollower(servers, topic, CdcCodec(json.loads(record))) as follower:
            ready.set()
            while not stop.is_set():
                updates = follower.advance(max_seconds=0.01)
                now = time.time()
                for update in updates:
                    fields = update.data  # k first, ts second (see `columns`)
                    seen.append((fields[0], fields[1].timestamp(), now))
    else:
        import io

        import fastavro
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        schema = fastavro.parse_schema(json.loads(record))
        consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": f"bench-streaming-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        ready.set()
        while not stop.is_set():
            msg = consumer.poll(0.01)
            if msg is None or msg.error() is not None:
                continue
            now = time.time()
            row = fastavro.schemaless_reader(io.BytesIO(msg.value()), schema, None)
            seen.append((row["k"], row["ts"].timestamp(), now))
        consumer.close()
    out.put(seen)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows-per-second", type=int, default=200, help="the rate source's rate")
    ap.add_argument("--trigger", type=float, default=1.0, help="the trigger interval, seconds")
    ap.add_argument("--batches", type=int, default=20, help="measured batches per query run")
    ap.add_argument("--warmup", type=int, default=5, help="batches before the measured ones")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--warmup-rounds",
        type=int,
        default=2,
        help="rounds run first and not reported (each query for --warmup + 5 batches): the "
        "JVM's first queries run its code cold (after one such round, the first measured "
        "round was still the slowest in most runs)",
    )
    ap.add_argument("--shape", choices=SHAPES, default="kv", help="as bench_sink.py's")
    ap.add_argument("--json", metavar="FILE", help="also write the results to FILE as JSON")
    args = ap.parse_args()
    if args.batches < 1 or args.warmup < 1 or args.rounds < 1 or args.warmup_rounds < 0:
        ap.error("--batches, --warmup and --rounds must be at least 1, --warmup-rounds 0 or more")
    spark = local_spark("bench-streaming", {"spark.sql.shuffle.partitions": "2"})
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    from cdc_emitter import CdcSink
    from cdc_emitter.kafka import ensure_topic
    from cdc_emitter.spark.schema import data_schema

    work = Path(tempfile.mkdtemp(prefix="cdc-bench-streaming-"))
    context = multiprocessing.get_context("spawn")
    rounds: list[dict] = []
    try:
        with kafka() as servers:
            source = (
                spark.readStream.format("rate")
                .option("rowsPerSecond", args.rows_per_second)
                .option("numPartitions", 2)
                .load()
            )
            key = F.col("value")
            extra = shape_columns(key, args.shape)[1:]  # the shape's key is k itself
            columns = [key.alias("k"), F.col("timestamp").alias("ts"), *extra]
            rows = source.select(*columns)
            record = data_schema(rows.schema)
            schema = json.dumps(record)

            def run(kind: str, index: int, measured: int) -> dict:
                topic = f"bench-streaming-{kind}-{uuid.uuid4().hex[:8]}"
                ensure_topic(servers, topic, create=True, partitions=2)
                checkpoint = str(work / f"{kind}-{index}")
                ready, stop, out = context.Event(), context.Event(), context.Queue()
                reader = context.Process(
                    target=consume, args=(kind, servers, topic, schema, ready, stop, out)
                )
                reader.start()
                if not ready.wait(60):
                    reader.terminate()
                    raise RuntimeError(f"the {kind} consumer did not start")
                trigger = f"{args.trigger} seconds"
                if kind == "sink":
                    sink = CdcSink(servers, topic, checkpoint_location=checkpoint)
                    writer = rows.writeStream.foreachBatch(sink)
                elif kind == "foreach":

                    def write(df, _batch_id):
                        (
                            df.select(to_avro(F.struct(*df.columns), schema).alias("value"))
                            .write.format("kafka")
                            .option("kafka.bootstrap.servers", servers)
                            .option("topic", topic)
                            .save()
                        )

                    writer = rows.writeStream.foreachBatch(write)
                else:
                    writer = (
                        rows.select(to_avro(F.struct(*rows.columns), schema).alias("value"))
                        .writeStream.format("kafka")
                        .option("kafka.bootstrap.servers", servers)
                        .option("topic", topic)
                    )
                query = (
                    writer.option("checkpointLocation", checkpoint)
                    .trigger(processingTime=trigger)
                    .start()
                )
                wanted = args.warmup + measured
                try:
                    while True:
                        if query.exception() is not None:
                            raise RuntimeError(f"the {kind} query failed: {query.exception()}")
                        done = [p for p in query.recentProgress if p["numInputRows"] > 0]
                        if len(done) >= wanted + 1:  # batch 0 may be empty; one spare
                            break
                        time.sleep(0.2)
                    progress = list(query.recentProgress)
                finally:
                    query.stop()
                time.sleep(DRAIN_SECONDS)
                stop.set()
                seen = out.get(timeout=120)
                reader.join(30)
                # batch ids from 0, in order: the rate values of batch b follow those before it
                batches = sorted(
                    {p["batchId"]: p for p in progress}.values(), key=lambda p: p["batchId"]
                )
                with_rows = [p for p in batches if p["numInputRows"] > 0]
                first, last = with_rows[args.warmup], with_rows[wanted - 1]
                measured = [
                    p for p in batches if first["batchId"] <= p["batchId"] <= last["batchId"]
                ]
                below = sum(p["numInputRows"] for p in batches if p["batchId"] < first["batchId"])
                ends, starts, upto = [], [], below  # each measured batch's last k + 1, start
                for p in measured:
                    upto += p["numInputRows"]
                    ends.append(upto)
                    starts.append(_epoch(p["timestamp"]))
                latencies = [
                    s - starts[bisect.bisect_right(ends, k)]
                    for k, _ts, s in seen
                    if below <= k < upto
                ]
                missing = (upto - below) - len({k for k, _ts, _s in seen if below <= k < upto})
                if missing:
                    raise RuntimeError(
                        f"the {kind} consumer did not have {missing} rows of the measured batches"
                    )
                shutil.rmtree(checkpoint, ignore_errors=True)
                return {
                    "trigger_ms": [p["durationMs"]["triggerExecution"] for p in measured],
                    "add_batch_ms": [p["durationMs"].get("addBatch", 0) for p in measured],
                    "rows_per_batch": statistics.median(p["numInputRows"] for p in measured),
                    "latency_s": statistics.median(latencies),
                    "latency_p90_s": statistics.quantiles(latencies, n=10)[-1],
                }

            kinds = ("sink", "peer", "foreach")
            for index in range(args.warmup_rounds):
                for kind in kinds:
                    run(kind, -1 - index, 5)
                print(f"warm-up round {index + 1} done", flush=True)
            for index in range(args.rounds):
                turn = index % len(kinds)
                order = kinds[turn:] + kinds[:turn]
                result = {kind: run(kind, index, args.batches) for kind in order}
                one = {
                    kind: {
                        "trigger_ms": statistics.median(r["trigger_ms"]),
                        "add_batch_ms": statistics.median(r["add_batch_ms"]),
                        "rows_per_batch": r["rows_per_batch"],
                        "latency_s": r["latency_s"],
                        "latency_p90_s": r["latency_p90_s"],
                    }
                    for kind, r in result.items()
                }
                rounds.append(one)
                print(
                    f"round {index + 1}: triggerExecution median {one['sink']['trigger_ms']:.0f} "
                    f"ms against {one['peer']['trigger_ms']:.0f} ms "
                    f"({one['sink']['trigger_ms'] / one['peer']['trigger_ms']:.2f}x); "
                    f"row latency median {one['sink']['latency_s']:.3f} s against "
                    f"{one['peer']['latency_s']:.3f} s "
                    f"({one['sink']['latency_s'] / one['peer']['latency_s']:.2f}x); "
                    f"foreach: {one['foreach']['trigger_ms']:.0f} ms, "
                    f"{one['foreach']['latency_s']:.3f} s",
                    flush=True,
                )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    def of(ours: str, peer: str, figure: str) -> list[float]:
        return [r[ours][figure] / r[peer][figure] for r in rounds]

    figures = {
        "batch": of("sink", "peer", "trigger_ms"),
        "latency": of("sink", "peer", "latency_s"),
        "batch/foreach": of("sink", "foreach", "trigger_ms"),
        "latency/foreach": of("sink", "foreach", "latency_s"),
        "foreach/peer": of("foreach", "peer", "trigger_ms"),
    }
    for name, values in figures.items():
        print(
            f"{name}: min {min(values):.2f}x median {statistics.median(values):.2f}x "
            f"max {max(values):.2f}x"
        )
    ours = f"CdcSink as foreachBatch ({args.shape} rows, rate source)"
    peer = "to_avro + Spark's Kafka sink (writeStream)"
    foreach = "to_avro + write.format('kafka') in a foreachBatch function"
    write_json(
        args.json,
        "streaming",
        {
            "rows_per_second": args.rows_per_second,
            "trigger_seconds": args.trigger,
            "batches": args.batches,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "warmup_rounds": args.warmup_rounds,
            "shape": args.shape,
        },
        rounds,
        [
            ratio(
                "batch",
                f"{ours}: median triggerExecution",
                f"{peer}: median triggerExecution",
                figures["batch"],
                better="lower",
                target=1.2,
                meaning="time: a micro-batch's triggerExecution, ours over the peer's",
            ),
            ratio(
                "latency",
                f"{ours}: a row's time proven complete to a consumer",
                f"{peer}: a row's record read by a consumer",
                figures["latency"],
                better="lower",
                target=1.2,
                meaning="time: from the start of a row's micro-batch to a consumer having it, "
                "ours over the peer's (medians over the rows)",
            ),
            ratio(
                "batch/foreach",
                f"{ours}: median triggerExecution",
                f"{foreach}: median triggerExecution",
                figures["batch/foreach"],
                better="lower",
                meaning="time: a micro-batch's triggerExecution, ours over the same work as the "
                "peer's done in a foreachBatch function",
            ),
            ratio(
                "latency/foreach",
                f"{ours}: a row's time proven complete to a consumer",
                f"{foreach}: a row's record read by a consumer",
                figures["latency/foreach"],
                better="lower",
                meaning="time: from the start of a row's micro-batch to a consumer having it, "
                "ours over the same work as the peer's done in a foreachBatch function",
            ),
            ratio(
                "foreach/peer",
                f"{foreach}: median triggerExecution",
                f"{peer}: median triggerExecution",
                figures["foreach/peer"],
                better="lower",
                meaning="time: what a foreachBatch function costs a micro-batch over a sink "
                "inside the query's plan, doing the same work",
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
