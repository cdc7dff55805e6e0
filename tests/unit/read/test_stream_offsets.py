"""The cdcv2 source's offsets, with a follower that stands in for the topic: a batch ends at
the frontier, never before its start; a restarted query (a start the reader did not give)
reads afresh from that frontier and catches up to it first; a closed history stays closed; a
replay asks for exactly the range. A stream of plain columns reaches Spark as Arrow record
batches, any other as tuples, with the same rows. No Spark session, no broker."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_emitter.protocol import Update
from cdc_emitter.read import stream_source
from cdc_emitter.read.stream_source import CdcV2StreamReader, _Settings

DATA = {"type": "record", "name": "data", "fields": [{"name": "k", "type": "long"}]}


class FakeFollower:
    """Hands out ``script``'s steps, one per `advance`: (updates, frontier after)."""

    made: list = []

    def __init__(self, servers, topic, codec, config, *, broker_timeout, start):
        self.start, self.steps, self.frontier = start, list(FakeFollower.script), (0,)
        self.closed = False
        self.reader = type("R", (), {"messages": 0})()
        FakeFollower.made.append(self)

    def advance(self, _seconds):
        if not self.steps:
            return []
        updates, self.frontier = self.steps.pop(0)
        self.reader.messages += 1
        return [u for u in updates if u.time >= self.start]

    def close(self):
        self.closed = True


@pytest.fixture
def reader(monkeypatch):
    FakeFollower.made = []
    monkeypatch.setattr(stream_source, "TopicFollower", FakeFollower)
    settings = _Settings({"kafka.bootstrap.servers": "b:9092", "topic": "t"})
    return CdcV2StreamReader(settings, DATA)


def u(k: int, t: int) -> Update:
    return Update((k,), t, 1)


def rows_of(handed) -> list[tuple]:
    """What Spark gets from the reader, as tuples: record batches' rows, or the tuples."""
    out: list[tuple] = []
    for item in handed:
        if isinstance(item, pa.RecordBatch):
            out.extend(tuple(row.values()) for row in item.to_pylist())
        else:
            out.append(item)
    return out


def test_batches_end_at_the_frontier(reader):
    FakeFollower.script = [([u(1, 0), u(2, 1)], (2,)), ([], (2,)), ([u(3, 2)], (3,))]
    start = reader.initialOffset()
    rows, end = reader.read(start)
    assert (rows_of(rows), end) == ([(1, 0, 1), (2, 1, 1)], {"frontier": 2, "closed": False})
    rows, again = reader.read(end)
    assert (rows_of(rows), again) == ([], end)  # nothing new: the same offset
    rows, last = reader.read(again)
    assert (rows_of(rows), last) == ([(3, 2, 1)], {"frontier": 3, "closed": False})
    assert len(FakeFollower.made) == 1  # one follower for the query's life


def test_a_restart_reads_afresh_and_catches_up_to_its_start(reader):
    FakeFollower.script = [([u(1, 0)], (1,)), ([u(2, 1), u(3, 2)], (3,)), ([u(4, 3)], (4,))]
    rows, end = reader.read({"frontier": 2, "closed": False})  # from a checkpoint
    # the first advance stops below 2; the follower is read on until it passes it
    assert rows_of(rows) == [(3, 2, 1)]
    assert end == {"frontier": 3, "closed": False}
    assert FakeFollower.made[0].start == 2


def test_a_frontier_below_the_start_never_moves_the_offset_back(reader, monkeypatch):
    FakeFollower.script = [([], (1,))]
    reader.settings.broker_timeout = 0.05  # nothing more comes: the retention error
    from cdc_emitter.errors import BrokerError

    with pytest.raises(BrokerError, match="no longer proves the times below 5"):
        reader.read({"frontier": 5, "closed": False})
    assert FakeFollower.made[0].closed and reader._follower is None


def test_a_closed_history(reader):
    FakeFollower.script = [([u(1, 7)], ())]
    rows, end = reader.read(reader.initialOffset())
    assert (rows_of(rows), end) == ([(1, 7, 1)], {"frontier": 0, "closed": True})
    rows, again = reader.read(end)
    assert (rows_of(rows), again) == ([], end)


def test_a_replay_asks_for_the_range(reader, monkeypatch):
    asked = []

    def replay(servers, topic, codec, start, end, config, *, broker_timeout):
        asked.append((start, end))
        return [u(9, start)]

    monkeypatch.setattr(stream_source, "replay", replay)
    assert rows_of(reader.readBetweenOffsets({"frontier": 2}, {"frontier": 5})) == [(9, 2, 1)]
    assert rows_of(reader.readBetweenOffsets({"frontier": 5}, {"frontier": 5, "closed": True}))
    assert asked == [(2, 5), (5, stream_source._UNBOUNDED)]


def test_options_are_checked_and_named_as_documented():
    from cdc_emitter.errors import ConfigError

    with pytest.raises(ConfigError, match="needs the option 'topic'"):
        _Settings({"kafka.bootstrap.servers": "b:9092"})
    with pytest.raises(ConfigError, match="option 'maxReadSeconds' must be a positive number"):
        _Settings({"kafka.bootstrap.servers": "b", "topic": "t", "maxreadseconds": "0"})
    settings = _Settings(
        {"kafka.bootstrap.servers": "b", "topic": "t", "kafka.security.protocol": "SSL"}
    )
    assert settings.config == {"security.protocol": "SSL"}


def test_the_module_imports_on_a_pyspark_without_python_data_sources(monkeypatch):
    """PySpark 3.5: no pyspark.sql.datasource; the module imports and register says why."""
    import importlib
    import sys

    from cdc_emitter.errors import ConfigError

    monkeypatch.setitem(sys.modules, "pyspark.sql.datasource", None)
    module = importlib.reload(stream_source)
    try:
        with pytest.raises(ConfigError, match="needs PySpark 4.0 or newer"):
            module.register(object())
    finally:
        monkeypatch.undo()
        importlib.reload(stream_source)


PLAIN = {
    "type": "record",
    "name": "data",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "v", "type": ["null", "string"]},
        {"name": "f", "type": "float"},
        {"name": "b", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "e", "symbols": ["A", "B"]}},
    ],
}


def test_plain_columns_reach_spark_as_record_batches_of_the_same_rows(monkeypatch):
    monkeypatch.setattr(stream_source, "BATCH_ROWS", 2)
    settings = _Settings({"kafka.bootstrap.servers": "b:9092", "topic": "t"})
    reader = CdcV2StreamReader(settings, PLAIN)
    updates = [
        Update((3, None, 1.5, b"", "B"), 2, -1),
        Update((1, "a", 0.5, b"x", "A"), 0, 1),
        Update((2, "b", -2.0, b"\0", "A"), 1, 3),
    ]
    handed = reader._rows(updates)
    assert [type(b) for b in handed] == [pa.RecordBatch, pa.RecordBatch]  # 2 rows a batch
    assert handed[0].schema.names == ["k", "v", "f", "b", "e", "time", "diff"]
    assert rows_of(handed) == [
        (1, "a", 0.5, b"x", "A", 0, 1),
        (2, "b", -2.0, b"\0", "A", 1, 3),
        (3, None, 1.5, b"", "B", 2, -1),
    ]
    assert reader._rows([]) == []


def test_other_columns_reach_spark_as_tuples():
    nested = {
        "type": "record",
        "name": "data",
        "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}],
    }
    settings = _Settings({"kafka.bootstrap.servers": "b:9092", "topic": "t"})
    reader = CdcV2StreamReader(settings, nested)
    assert reader.arrow is None
    assert reader._rows([Update(((1, 2),), 4, 1)]) == [([1, 2], 4, 1)]
