"""A streaming query stopped while the sink writes a batch ends quietly, and its restart completes
the batch.

Spark's stream thread takes a ``foreachBatch`` error for a stop's interruption by matching its
Python traceback against a regex (SPARK-39218, SPARK-48717) that overflows the thread's stack on
a long text: the Py4J error of an interrupted Spark job, with its Java stack trace, is one. The
sink raises a short `InterruptedBatchError` instead (see `cdc_emitter.sink.interrupted.interrupted_batch`).
"""

from __future__ import annotations

import threading
import time
import traceback

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import as_history, read_history

from cdc_emitter import CdcSink
from cdc_emitter.errors import InterruptedBatchError
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.sink.distributed import DistributedPath
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

#: The words from which Spark's regex reads the rest of the text, one stack frame per character.
PY4J_WORDS = "py4j.protocol.Py4JJavaError: An error occurred while calling"
ROWS = [(k, f"v{k}", 1) for k in range(2000)]


class SystemErr:
    """What the driver's JVM prints to ``System.err`` while in use: where a thread's uncaught
    error (the stream thread's ``StackOverflowError``) goes, past log4j."""

    def __init__(self, spark) -> None:
        self._jvm = spark._jvm

    def __enter__(self) -> SystemErr:
        system = self._jvm.java.lang.System
        self._saved = system.err
        self._buffer = self._jvm.java.io.ByteArrayOutputStream()
        system.setErr(self._jvm.java.io.PrintStream(self._buffer, True))
        return self

    def text(self) -> str:
        return str(self._buffer.toString())

    def __exit__(self, *exc) -> None:
        self._jvm.java.lang.System.setErr(self._saved)


def test_a_query_stopped_while_its_batch_is_written_ends_quietly_and_its_restart_completes_it(
    spark, kafka_bootstrap, topic_factory, tmp_path, monkeypatch
):
    topic = topic_factory()
    source, checkpoint = tmp_path / "in", str(tmp_path / "checkpoint")
    source.mkdir()
    pq.write_table(
        pa.table(
            {
                "k": pa.array([r[0] for r in ROWS], pa.int64()),
                "v": pa.array([r[1] for r in ROWS], pa.string()),
                "diff": pa.array([r[2] for r in ROWS], pa.int64()),
            }
        ),
        source / "batch-0.parquet",
    )

    # the first write of the batch's updates (after its claim) waits for the query's stop, so
    # that Spark's Kafka writer job runs on the interrupted stream thread
    writing, stopping = threading.Event(), threading.Event()
    write_messages = DistributedPath.write_messages

    def held(self, *args, **kwargs):
        if not writing.is_set():
            writing.set()
            stopping.wait(60)
            time.sleep(1.0)  # query.stop() has interrupted the stream thread meanwhile
        return write_messages(self, *args, **kwargs)

    monkeypatch.setattr(DistributedPath, "write_messages", held)
    raised: list[BaseException] = []

    def start(sink, record=False):
        def batch(df, batch_id):
            try:
                return sink(df, batch_id)
            except Exception as exc:
                raised.append(exc)
                raise

        stream = spark.readStream.schema("k long, v string, diff long").parquet(str(source))
        writer = stream.writeStream.foreachBatch(batch if record else sink)
        return writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()

    def new_sink():  # every batch by Spark's Kafka writer: none joined or produced on the driver
        return CdcSink(
            kafka_bootstrap,
            topic,
            checkpoint_location=checkpoint,
            encoder="jvm",
            small_batch_rows=0,
        )

    timeout = spark.conf.get("spark.sql.streaming.stopTimeout")
    spark.conf.set("spark.sql.streaming.stopTimeout", "60s")  # a stop that hangs fails the test
    try:
        with SystemErr(spark) as err:
            query = start(new_sink(), record=True)
            assert writing.wait(120), "the batch never came to write its updates"
            stopping.set()
            query.stop()
            time.sleep(0.5)  # the stream thread's last words, if any, printed
            printed = err.text()
    finally:
        spark.conf.set("spark.sql.streaming.stopTimeout", timeout)

    assert not query.isActive
    assert query.exception() is None
    assert "StackOverflowError" not in printed, printed[:2000]
    assert len(raised) == 1 and isinstance(raised[0], InterruptedBatchError), raised
    text = "".join(traceback.format_exception(raised[0]))  # what Spark's regex reads
    assert text.count(PY4J_WORDS) == 1
    after = text[text.index(PY4J_WORDS) :]
    assert len(after) < 500, after
    assert "InterruptedException" in after or "cancelled" in after, after

    # the claim was committed before the write: the restarted query writes the batch again
    sink = new_sink()
    query = start(sink)
    query.awaitTermination(120)
    assert query.exception() is None
    assert sink.last_result.reused
    codec = CdcCodec(data_schema(spark.createDataFrame([], "k long, v string").schema))
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, codec)
    assert violations == []
    assert frontier == (1,)
    assert history == as_history([((k, v), 0, d) for k, v, d in ROWS])
