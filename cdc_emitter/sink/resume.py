"""A batch's own earlier claim: found again, so that a re-run or a repeated `write` completes it.

A claim is committed before a batch's updates, so a writer that stops in between leaves a claim
whose updates readers wait for. Whoever writes that batch again must find its claim and write
the same updates under it, rather than claim anew:

- a streaming batch run again by Spark finds its claim by writer and batch id, in the sink log
  or in the topic (`claimed_before_record` reads back past other writers' claims when needed);
- a `CdcSink.write` batch has no batch id. The sink keeps it as `Unfinished` until its updates
  are written; a new sink with the same ``writer_id`` and ``complete_last=True`` looks for its
  writer's newest claim in the topic (`left_by_writer`).

Guarantees:

- a batch is taken as the unfinished one only with the same data: its digest is compared
  before anything is written (`NotThatBatch` otherwise, and it is written as a new batch);
- a `write` at another time than the unfinished batch's is refused (`ReplayError`): readers
  would wait on the unfinished claim forever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from cdc_emitter.errors import ReplayError
from cdc_emitter.kafka.frontier import TopicFrontier
from cdc_emitter.sink import decide
from cdc_emitter.sink.batch import Batch
from cdc_emitter.sink.claim import Stated
from cdc_emitter.sink.digest import parse_digest
from cdc_emitter.sink.interval import Recorded
from cdc_emitter.sink.log import DataFrameSinkLog, SinkLog

__all__ = [
    "NotThatBatch",
    "Unfinished",
    "claimed_before_record",
    "completing",
    "left_by_writer",
    "own_claim",
]


class Unfinished(NamedTuple):
    """A `CdcSink.write` batch whose claim was sent and whose updates are not all written."""

    lower: int
    upper: int | None
    time: int | None
    digest_text: str
    #: the claim is known committed; else (its commit failed, its reply maybe lost) it is
    #: looked for in the topic before it is taken as this batch's
    confirmed: bool = True


class NotThatBatch(Exception):
    """A `write` batch with other data than the one its writer left unfinished: a new batch."""


def claimed_before_record(
    decided: decide.Decided,
    sinklog: SinkLog | DataFrameSinkLog | None,
    batch_id: int,
    *,
    topic: str,
    column_mode: bool,
    read_back: Callable[[int], TopicFrontier],
) -> decide.Decided:
    """A restarted query's first batch with no record may still have claimed before it died
    (between its claim and its sink log record), with other writers' claims since pushing that
    claim out of the tail read. Its claim lies after the previous batch's, which the sink log
    knows, so the topic is read back that far once (``read_back``). Found, the batch keeps it.
    """
    previous = sinklog.get(batch_id - 1) if sinklog is not None and batch_id else None
    if previous is None or previous.topic not in (None, topic):
        return decided
    state = read_back(previous.lower)
    claimed = decide.claimed_in(state, decided.writer, batch_id, column_mode=column_mode)
    return decided if claimed is None else claimed


def left_by_writer(state: TopicFrontier, writer: str, fixed_time: int | None) -> Unfinished | None:
    """The newest `write` batch ``writer`` claimed in ``state``, as a candidate to complete: a
    process that died between a claim and its last update leaves its readers waiting, and the
    same command run again (the same writer id, the same data) completes it. Other data is
    found out by its digest, and written as a new batch. None when there is none, or when
    ``fixed_time`` is not its time."""
    key = (writer, None)
    found, digest_text = state.batches.get(key), state.digests.get(key)
    if found is None or found[1] is None or not digest_text:
        return None
    lower, upper = found
    if fixed_time is not None and fixed_time != upper - 1:
        return None
    return Unfinished(lower, upper, upper - 1, digest_text)


def completing(
    unfinished: Unfinished, decided: decide.Decided, fixed_time: int | None, *, topic: str
) -> decide.Decided:
    """The decision of a `write` that completes ``unfinished``: the same interval and time,
    compared with its digest before anything is written.

    Raises:
        ReplayError: ``fixed_time`` is another time than the unfinished batch's.
    """
    if fixed_time is not None and fixed_time != unfinished.time:
        upper = "∞" if unfinished.upper is None else unfinished.upper
        raise ReplayError(
            f"topic {topic!r}: this sink's last batch claimed [{unfinished.lower}, {upper}) "
            "but its updates were not all written, and readers wait on it. Nothing was "
            f"written: write the same data again (time={unfinished.time}) to complete it"
        )
    recorded = Recorded(unfinished.lower, unfinished.upper, unfinished.time)
    digest = parse_digest(unfinished.digest_text)
    return decide.Decided(decided.writer, unfinished.lower, recorded, digest, decided.state)


def own_claim(
    state: TopicFrontier, batch: Batch, unfinished: Unfinished | None
) -> tuple[Stated | None, Unfinished | None]:
    """This batch's committed claim, and ``unfinished`` as it stands after looking.

    A re-run's claim is found in ``state`` by writer and batch id. A `write` batch's is the one
    its sink left unfinished: known committed, or found in ``state`` with the same interval and
    digest (then it is confirmed).
    """
    if batch.batch_id is not None:
        key = (batch.writer, batch.batch_id)
        found = state.batches.get(key)
        if found is None:
            return None, unfinished
        stated = Stated(batch.writer, batch.batch_id, found[0], found[1], state.digests.get(key))
        return stated, unfinished
    if unfinished is None:
        return None, None
    newest: tuple[str, int | None] = (batch.writer, None)  # the writer's newest write batch
    if not unfinished.confirmed:  # committed after all?
        if state.batches.get(newest) != (unfinished.lower, unfinished.upper) or (
            state.digests.get(newest) != unfinished.digest_text
        ):
            return None, unfinished
        unfinished = unfinished._replace(confirmed=True)
    elif batch.recorded is None:
        return None, unfinished
    stated = Stated(batch.writer, None, unfinished.lower, unfinished.upper, unfinished.digest_text)
    return stated, unfinished
