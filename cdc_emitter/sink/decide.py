"""A batch decided before any Spark work: its interval's lower bound — decided once — and the
`Batch` handed to a data path.

A batch that already has a recorded interval — in the sink log beside the checkpoint
(`cdc_emitter.sink.log`), or in the headers of the topic's progress statements (same writer,
same batch id) — keeps it; otherwise its lower bound is the topic's frontier.

Guarantees:

- a re-run keeps its first attempt's interval, and its writer as first recorded;
- a sink log entry recorded for another topic is ignored (with a warning);
- a closed topic (a statement with upper ``[]``) takes nothing more: `LateUpdateError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from cdc_emitter.errors import LateUpdateError
from cdc_emitter.kafka.frontier import TopicFrontier
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.headers import HEADER_BATCH, HEADER_KIND, HEADER_WRITER
from cdc_emitter.sink.batch import Batch
from cdc_emitter.sink.digest import parse_digest
from cdc_emitter.sink.interval import Recorded, recorded_from_statement
from cdc_emitter.sink.interval import batch_time as decide_batch_time
from cdc_emitter.sink.layout import Layout
from cdc_emitter.sink.log import DataFrameSinkLog, SinkLog

log = logging.getLogger("cdc_emitter.sink")  # CdcSink's logger: one name for the sink's lines


class Decided(NamedTuple):
    """A batch's interval as decided before any Spark work."""

    writer: str  # the batch's writer (a re-run's: as first recorded)
    lower: int
    recorded: Recorded | None  # a re-run's first decision
    digest: tuple | None  # what a re-run's first attempt wrote, if complete in the topic
    state: TopicFrontier  # the topic's frontier when the interval was decided
    logged: bool = False  # ``recorded`` came from the sink log (else from the topic's claim)


def decide_interval(
    sinklog: SinkLog | DataFrameSinkLog | None,
    batch_id: int | None,
    writer: str,
    state: TopicFrontier | None,
    *,
    topic: str,
    column_mode: bool,
    learn_frontier: Callable[[], TopicFrontier],
) -> Decided:
    """The batch's lower bound: a re-run's recorded one (in the sink log, else in the
    topic's statements), else the topic's frontier (``state``, or `learn_frontier`'s)."""
    recorded = None
    if sinklog is not None and batch_id is not None:
        entry = sinklog.get(batch_id)
        if entry is not None and entry.topic not in (None, topic):
            log.warning(
                "sink log %s records batch %d for topic %r, not %r: ignored",
                sinklog.location,
                batch_id,
                entry.topic,
                topic,
            )
        elif entry is not None:
            recorded = Recorded(entry.lower, entry.upper, entry.time)
            writer = entry.writer or writer  # the batch's writer, as first recorded
    if recorded is None:
        state = state or learn_frontier()
        claimed = claimed_in(state, writer, batch_id, column_mode=column_mode)
        if claimed is not None:
            return claimed
    if recorded is not None:
        # what the first attempt wrote, if its progress statement made it to the topic
        state = state or learn_frontier()
        digest = parse_digest(state.digests.get((writer, batch_id)))
        return Decided(writer, recorded[0], recorded, digest, state, logged=True)
    assert state is not None  # learnt above
    if state.frontier is None:
        raise LateUpdateError(
            f"topic {topic!r} is closed (a progress statement with upper [] was written): "
            "nothing more can be written to it"
        )
    return Decided(writer, state.frontier, None, None, state)


def claimed_in(
    state: TopicFrontier, writer: str, batch_id: int | None, *, column_mode: bool
) -> Decided | None:
    """The batch as its claim among ``state``'s statements recorded it (same writer and batch
    id), with the digest of its first attempt; None when ``state`` holds no such claim."""
    found = state.recorded(writer, batch_id) if batch_id is not None else None
    if found is None:
        return None
    recorded = recorded_from_statement(*found, column_mode=column_mode)
    digest = parse_digest(state.digests.get((writer, batch_id)))
    return Decided(writer, recorded.lower, recorded, digest, state)


def new_batch(
    batch_id: int | None,
    layout: Layout,
    codec: CdcCodec,
    decided: Decided,
    fixed_time: int | None,
    *,
    topic: str,
    time_column: str | None,
    time_offset: int,
    late: Any,
    update_partitions: list[int] | None,
    redundant: bool = False,
) -> Batch:
    """The batch as decided before any Spark work: its interval's lower bound, its time in
    the default mode, the headers of its update messages."""
    batch_time = (
        None
        if time_column is not None
        else decide_batch_time(
            topic=topic,
            lower=decided.lower,
            recorded=decided.recorded,
            fixed_time=fixed_time,
            batch_id=batch_id,
            time_offset=time_offset,
            late=late,
            redundant=redundant,
        )
    )
    headers = [(HEADER_KIND, b"updates"), (HEADER_WRITER, decided.writer.encode())]
    if batch_id is not None:
        headers.append((HEADER_BATCH, str(batch_id).encode()))
    return Batch(
        what=batch_name(topic, batch_id),
        batch_id=batch_id,
        writer=decided.writer,
        schema=layout.schema,
        data_cols=layout.data_cols,
        diff_col=layout.diff_col,
        avro_data=layout.avro_data,
        codec=codec,
        lower=decided.lower,
        recorded=decided.recorded,
        logged=decided.logged,
        time=batch_time,
        headers=headers,
        update_partitions=update_partitions,
        earliest=0 if redundant and time_column is not None else None,
    )


def batch_name(topic: str, batch_id: int | None) -> str:
    """How messages name a batch: the topic, and the batch id when there is one."""
    return f"topic {topic!r}" + ("" if batch_id is None else f" batch {batch_id}")
