"""A long-lived CdcSink writer for the many-writers tests: one local Spark session, many batches.

    python writer_job.py BOOTSTRAP_SERVERS

Reads commands from stdin, one JSON object per line, and answers on stdout, one JSON object per
line (everything else the process prints, the JVM's too, goes to stderr). First, once Spark is up:

    {"ready": true, "pid": ...}

A batch (``"op": "write"``, the default):

    {"topic": "t", "batch": 3, "rows": [[k, v, time, diff], ...],
     "writer_id": "w", "checkpoint": "/dir" | null, "late": "error" | "advance",
     "call": "sink" | "write", "fresh": false, "sink_options": {...},
     "pause_after_claim": seconds | null}

runs ``sink(df, batch)`` (``"call": "write"``: ``sink.write(df)``) on a DataFrame of
``k long, v string, time long, diff long`` with ``CdcSink(BOOTSTRAP_SERVERS, topic,
time_column="time", diff_column="diff", writer_id=..., checkpoint_location=..., late=...,
**sink_options)``. One sink is kept per (topic, writer_id, checkpoint, late, call, options), as a
streaming query keeps its sink; ``"fresh": true`` makes a new one (a query restarted from its
checkpoint). ``sink_options`` that this CdcSink does not take are dropped and named in the
answer's ``"ignored"`` (so a test can run before the sink takes them, and fail on it at the end).
``pause_after_claim`` sets ``CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM`` for this batch only: this job
wraps the sink's claim commit (`ClaimProducer.commit`) to sleep that long after the claim is
committed and before the updates are written; the process's own environment applies when the
command has no such field.

Before calling the sink it prints ``{"start": true, "topic": ..., "batch": ...}``, then one of

    {"topic": ..., "batch": 3, "ok": true, "lower": 0, "upper": 10, "reused": false,
     "updates": 4, "ignored": [...]}
    {"topic": ..., "batch": 3, "ok": false, "error": "ConcurrentWriterError",
     "errors": ["ConcurrentWriterError", "CdcError", ...], "cdc_error": true, "message": "...",
     "ignored": [...]}

``errors`` is the exception's class hierarchy (names), so a test can ask for a base class.
``{"op": "ping"}`` answers ``{"pong": true}``; ``{"op": "exit"}`` (or the end of stdin) stops
Spark and exits.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the integration tests' helpers
from helpers import frame  # noqa: E402

PAUSE_ENV = "CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM"
DDL = "k long, v string, time long, diff long"


def _protocol_stream():
    """A private copy of stdout for the answers; fd 1 (Python's and the JVM's) goes to stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from cdc_emitter.spark.setup import sink_packages

    builder = SparkSession.builder
    jar = os.environ.get("CDC_SPARK_AVRO_JAR", "").strip()
    if jar:
        builder = builder.config("spark.jars", jar)
    else:
        builder = builder.config("spark.jars.packages", ",".join(sink_packages()))
    session = (
        builder.master("local[1]")
        .appName("cdc-emitter-writer-job")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "1")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "false")
        # a short-lived JVM doing small jobs: C1 only and the serial collector start faster (about
        # half the time to the first batch on a busy 2-core machine)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    _warm_up(session)
    return session


def _warm_up(session) -> None:
    """One small job of the kind a batch runs (Avro encoding, hashing, a shuffle) before
    answering ``ready``: the first job's class loading and code generation then happen while the
    writers start, not inside a test's first batch."""
    try:
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import to_avro

        df = frame(session, [(1, "x", 0, 1)], DDL)
        df.groupBy("k").agg(F.sum("diff")).collect()
        df.select(
            to_avro(F.struct("k", "v")).alias("a"), F.xxhash64("k", "time").alias("h")
        ).collect()
    except Exception:  # noqa: BLE001 - only a warm-up
        traceback.print_exc(file=sys.stderr)


class Writer:
    def __init__(self, bootstrap: str, out) -> None:
        from cdc_emitter import CdcSink

        self.bootstrap, self.out = bootstrap, out
        self.sink_class = CdcSink
        self.accepted = set(inspect.signature(CdcSink.__init__).parameters)
        self.sinks: dict[str, object] = {}
        self.spark = _spark()

    def say(self, **answer) -> None:
        self.out.write(json.dumps(answer) + "\n")
        self.out.flush()

    def run(self, line: str) -> bool:
        command = json.loads(line)
        op = command.get("op", "write")
        if op == "exit":
            return False
        if op == "ping":
            self.say(pong=True)
        elif op == "write":
            self.write(command)
        else:
            self.say(ok=False, error="UnknownCommand", message=f"unknown op {op!r}")
        return True

    def sink_for(self, command: dict) -> tuple[object, list[str]]:
        options = dict(command.get("sink_options") or {})
        ignored = sorted(k for k in options if k not in self.accepted)
        for key in ignored:
            del options[key]
        args = dict(
            topic=command["topic"],
            writer_id=command.get("writer_id"),
            checkpoint_location=command.get("checkpoint"),
            late=command.get("late", "error"),
        )
        key = json.dumps([args, options, command.get("call", "sink")], sort_keys=True)
        if command.get("fresh") or key not in self.sinks:
            old = self.sinks.pop(key, None)
            if old is not None:
                old.close()
            self.sinks[key] = self.sink_class(
                self.bootstrap,
                args.pop("topic"),
                time_column="time",
                diff_column="diff",
                **args,
                **options,
            )
        return self.sinks[key], ignored

    def write(self, command: dict) -> None:
        topic, batch = command["topic"], command.get("batch")
        where = {"topic": topic, "batch": batch}
        pause = command.get("pause_after_claim")
        saved = os.environ.get(PAUSE_ENV)
        ignored: list[str] = []
        try:
            if pause is not None:
                os.environ[PAUSE_ENV] = str(pause)
            sink, ignored = self.sink_for(command)
            df = frame(self.spark, [tuple(r) for r in command.get("rows", [])], DDL)
            self.say(start=True, **where)
            if command.get("call", "sink") == "write":
                result = sink.write(df)
            else:
                result = sink(df, int(batch))
        except Exception as exc:  # noqa: BLE001 - every failure is an answer
            from cdc_emitter.errors import CdcError

            traceback.print_exc(file=sys.stderr)
            self.say(
                **where,
                ok=False,
                error=type(exc).__name__,
                errors=[c.__name__ for c in type(exc).__mro__],
                cdc_error=isinstance(exc, CdcError),
                message=str(exc),
                ignored=ignored,
            )
            return
        finally:
            if pause is not None:
                if saved is None:
                    os.environ.pop(PAUSE_ENV, None)
                else:
                    os.environ[PAUSE_ENV] = saved
        self.say(
            **where,
            ok=True,
            lower=result.lower,
            upper=result.upper,
            reused=result.reused,
            updates=result.updates,
            ignored=ignored,
        )

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()
        self.spark.stop()


def _pause_after_claims() -> None:
    """Sleep ``$CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM`` seconds after each committed claim: the
    moment a writer is stopped or killed in the tests, between its claim and its updates."""
    import time

    from cdc_emitter.kafka.claims import ClaimProducer

    commit = ClaimProducer.commit

    def commit_then_pause(self, messages):
        offset = commit(self, messages)
        pause = float(os.environ.get(PAUSE_ENV) or 0)
        if pause > 0:
            time.sleep(pause)
        return offset

    ClaimProducer.commit = commit_then_pause


def main() -> int:
    out = _protocol_stream()
    _pause_after_claims()
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("cdc_emitter").setLevel(logging.INFO)  # the "cdc sink ..." lines
    writer = Writer(sys.argv[1], out)
    writer.say(ready=True, pid=os.getpid())
    try:
        for line in sys.stdin:
            if line.strip() and not writer.run(line):
                break
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
