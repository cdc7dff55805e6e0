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


def test_nothing_is_recorded_without_a_log_a_batch_id_or_for_a_re_run():
    assert record_later(None, batch(), 11, "t") is None
    assert record_later(MemoryLog(), batch(batch_id=None), 11, "t") is None
    rerun = dataclasses.replace(batch(), recorded=Recorded(10, 11, 10))
    assert record_later(MemoryLog(), rerun, 11, "t") is None


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
