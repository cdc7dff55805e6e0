"""A batch's sink log record, written by a thread of its own after the batch (pure: a log in
memory, no Spark, no broker)."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from cdc_emitter.errors import CdcError
from cdc_emitter.sink.batch import Batch
from cdc_emitter.sink.commit import record_later
from cdc_emitter.sink.interval import Recorded
from cdc_emitter.sink.log import SinkLogEntry


class MemoryLog:
    """A sink log in memory: the first record of a batch id wins, as on a file system."""

    location = "memory://checkpoint/cdc-emitter-sink"

    def __init__(self, fail: Exception | None = None, gate: threading.Event | None = None):
        self.entries: dict[int, SinkLogEntry] = {}
        self.fail, self.gate = fail, gate

    def put(self, entry: SinkLogEntry) -> SinkLogEntry:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        return self.entries.setdefault(entry.batch_id, entry)


def batch(batch_id: int | None = 4, lower: int = 10) -> Batch:
    return Batch(
        what=f"topic 't' batch {batch_id}",
        batch_id=batch_id,
        writer="w",
        schema=None,
        data_cols=["k"],
        diff_col=None,
        avro_data={},
        codec=None,
        lower=lower,
        recorded=None,
        time=lower,
        headers=[],
        update_partitions=None,
    )


def test_the_record_is_written_by_a_thread_and_waited_for():
    gate = threading.Event()
    log = MemoryLog(gate=gate)
    pending = record_later(log, batch(), 11, "t")
    assert pending is not None and log.entries == {}  # the batch goes on meanwhile
    gate.set()
    pending.wait()
    assert log.entries == {4: SinkLogEntry(4, 10, 11, 10, "w", "t")}


def test_nothing_is_recorded_without_a_log_a_batch_id_or_for_a_re_run_the_log_knows():
    assert record_later(None, batch(), 11, "t") is None
    assert record_later(MemoryLog(), batch(batch_id=None), 11, "t") is None
    logged = dataclasses.replace(batch(), recorded=Recorded(10, 11, 10), logged=True)
    assert record_later(MemoryLog(), logged, 11, "t") is None


def test_a_re_run_found_in_the_topic_is_recorded():
    """A re-run that found its claim in the topic (its first attempt died before its record)
    records it, so that the batch after it can look back from it."""
    log = MemoryLog()
    found = dataclasses.replace(batch(), recorded=Recorded(10, 11, 10))
    pending = record_later(log, found, 11, "t")
    assert pending is not None
    pending.wait()
    assert log.entries == {4: SinkLogEntry(4, 10, 11, 10, "w", "t")}


def test_another_interval_recorded_first_is_raised_when_waited_for():
    log = MemoryLog()
    log.entries[4] = SinkLogEntry(4, 7, 9, 7, "w", "t")
    pending = record_later(log, batch(), 11, "t")
    assert pending is not None
    with pytest.raises(CdcError, match=r"batch 4: the sink log already records interval \[7, 9\)"):
        pending.wait()


def test_a_failed_write_names_the_batch_and_the_log():
    pending = record_later(MemoryLog(fail=OSError("disk full")), batch(), 11, "t")
    assert pending is not None
    with pytest.raises(CdcError) as raised:
        pending.wait()
    assert str(raised.value) == (
        "topic 't' batch 4: its interval could not be recorded in the sink log "
        "memory://checkpoint/cdc-emitter-sink: disk full"
    )
