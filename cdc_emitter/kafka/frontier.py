"""The topic's frontier, read from the tail of its partitions.

A sink must learn where the topic's history stands before it writes (the lower bound of a new
batch's interval) and whether a batch it is about to write was written before (a re-run): both
come from the progress statements at the end of the topic, found by reading the last messages of
each partition backwards in growing chunks — never by scanning the whole topic.

Guarantees: `topic_frontier` reads at most what it needs to find a progress statement on
partition 0 (where the sink writes every statement); a message it cannot decode is not judged here
(the verifier reports it); transient broker errors are retried with back-off.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_emitter.errors import BrokerError, RefusedError
from cdc_emitter.kafka.reading import KafkaRecord, TopicOffsets, partition_tails
from cdc_emitter.protocol.headers import (
    HEADER_BATCH,
    HEADER_BATCH_LOWER,
    HEADER_BATCH_UPPER,
    HEADER_DIGEST,
    HEADER_KIND,
    HEADER_LOWER,
    HEADER_SCHEMA,
    HEADER_SHAPE,
    HEADER_UPPER,
    HEADER_WRITER,
)
from cdc_emitter.protocol.updates import Progress

__all__ = ["TopicFrontier", "retrying", "topic_frontier"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicFrontier:
    """What the tail of a topic says: its frontier and the latest progress statement's origin.

    ``frontier`` is the largest progress upper found (None: the history is closed; 0 for a
    topic without any progress statement). ``writer``/``batch``/``lower``/``upper`` describe
    the progress statement that set it (``batch`` None when unknown).
    """

    frontier: int | None
    writer: str | None = None
    batch: int | None = None
    lower: int | None = None
    upper: int | None = None
    found: bool = False
    #: ``{(writer, batch): (lower, upper)}`` of every progress statement with our headers seen
    #: in the tail that was read (a re-run batch finds its interval here even if another
    #: statement came after it); ``batch`` None: the writer's newest batch without an id
    batches: dict = field(default_factory=dict)
    #: the data schema (compact JSON) the newest progress statement in the tail was written
    #: with, when it says so (our header); else None
    schema: str | None = None
    #: the newest update message in the tail, to try a schema on when no statement names one
    update_sample: bytes | None = None
    #: partition 0's end offset when the tail was read (where statements go): unchanged later,
    #: no statement can have been written since
    partition0_end: int | None = None

    #: ``{(writer, batch): digest header text}`` of the statements in ``batches`` that carry one
    digests: dict = field(default_factory=dict)
    #: the shape header text of the statement ``schema`` came from (None: it has none)
    shape: str | None = None
    #: ``(partition, offset, why)`` of a message in the tail that is not CDCv2 (None: none seen)
    foreign: tuple[int, int, str] | None = None

    def recorded(self, writer: str, batch: int) -> tuple[int, int | None] | None:
        return self.batches.get((writer, batch))


def _headers(record: Any) -> dict[str, bytes]:
    return {k: (v or b"") for k, v in (record.headers or [])}


class _NotCdc(Exception):
    """A message that is neither an update array nor a progress statement."""


def _progress_of(
    record: Any, decode: Callable[[bytes], Any] | None
) -> tuple[int, int | None, dict] | None:
    """``(lower, upper, headers)`` if ``record`` is a progress statement, else None; raises
    `_NotCdc` for a message ``decode`` refuses (or one without a value)."""
    h = _headers(record)
    kind = h.get(HEADER_KIND)
    if kind == b"updates":
        return None
    if kind == b"progress" and HEADER_LOWER in h:
        upper = h.get(HEADER_UPPER, b"")
        return int(h[HEADER_LOWER]), (int(upper) if upper else None), h
    if decode is None:
        return None
    if record.value is None:
        raise _NotCdc("a message without a value (a tombstone)")
    try:  # a message from another writer: look at its value
        message = decode(record.value)
    except Exception as exc:  # noqa: BLE001 - any refusal: the caller says what was found
        raise _NotCdc(str(exc)[:160]) from None
    if isinstance(message, Progress) and len(message.lower) == 1:
        return message.lower[0], (message.upper[0] if message.upper else None), h
    return None


#: Seconds `topic_frontier` keeps retrying a broker that does not answer, in all (default).
RETRY_WINDOW = 30.0


def retrying(fn: Callable[[], Any], window: float = RETRY_WINDOW) -> Any:
    """``fn()``, retried on BrokerError with back-off for at most ``window`` seconds in all: a
    just-created topic (or a restarted broker) briefly answers "not leader for partition". A
    lasting problem is raised with how long and how often it was tried."""
    began = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except RefusedError:
            raise  # wrong credentials or certificate: no retry mends them
        except BrokerError as exc:
            waited = time.monotonic() - began
            pause = min(0.2 * 2 ** (attempt - 1), 5.0)
            if "does not exist" in str(exc) or waited + pause >= window:
                if attempt == 1:
                    raise
                raise BrokerError(f"{exc} (tried {attempt} times over {waited:.0f}s)") from exc
            log.debug("retrying after %s", exc)
            time.sleep(pause)


def _tails(
    bootstrap_servers: str,
    topic: str,
    n: int,
    config: Mapping[str, Any] | None,
    offsets: TopicOffsets | None,
    broker_timeout: float,
) -> tuple[list[KafkaRecord], dict[int, int]]:
    """The last ``n`` messages of every partition, through ``offsets`` when given."""
    if offsets is None:
        return partition_tails(bootstrap_servers, topic, n, config=config, timeout=broker_timeout)
    return offsets.partition_tails(n, broker_timeout)


def topic_frontier(
    bootstrap_servers: str,
    topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    decode: Callable[[bytes], Any] | None = None,
    first_chunk: int = 64,
    offsets: TopicOffsets | None = None,
    broker_timeout: float = RETRY_WINDOW,
    back_to: int | None = None,
) -> TopicFrontier:
    """The frontier of ``topic`` from the tail of its partitions, read backwards in chunks.

    Reads the last ``first_chunk`` messages of every partition, then 8× more, and so on, until
    partition 0 (where this sink writes every progress statement) shows a progress statement or
    has been read entirely; the frontier is the largest upper among the statements seen. Our
    progress messages are recognised by their headers; others by decoding their value with
    ``decode`` (a codec's ``decode``), when given. ``offsets``: a
    `TopicOffsets` to read with (else a client for this call).
    A broker that does not answer is retried for at most ``broker_timeout`` seconds in all.
    ``back_to``: read on until partition 0 shows a statement whose lower bound is at most this
    time (or has been read entirely), so that ``batches`` holds every statement since.
    """
    n = first_chunk
    while True:
        best: tuple[int, int | None, dict] | None = None
        batches: dict = {}
        digests: dict = {}
        schema: str | None = None
        shape: bytes | None = None
        sample: tuple[int, bytes] | None = None  # (timestamp, value) of the newest update message
        found_p0 = False
        foreign: tuple[int, int, str] | None = None
        lowest_p0: int | None = None  # the smallest lower bound of a statement on partition 0
        tail, ends = retrying(
            functools.partial(_tails, bootstrap_servers, topic, n, config, offsets, broker_timeout),
            broker_timeout,
        )
        per_partition: Counter = Counter(r.partition for r in tail)
        for record in tail:  # by partition, then offset: a later one is newer within a partition
            try:
                p = _progress_of(record, decode)
            except _NotCdc as exc:
                foreign = foreign or (record.partition, record.offset, str(exc))
                continue
            if p is None:
                if record.value is not None and (
                    sample is None or (record.timestamp or 0) >= sample[0]
                ):
                    sample = (record.timestamp or 0, record.value)
                continue
            if p[2].get(HEADER_SCHEMA) and (record.partition == 0 or schema is None):
                schema = p[2][HEADER_SCHEMA].decode()
                shape = p[2].get(HEADER_SHAPE)  # the same statement's, or none
            found_p0 = found_p0 or record.partition == 0
            if record.partition == 0 and (lowest_p0 is None or p[0] < lowest_p0):
                lowest_p0 = p[0]
            if HEADER_WRITER in p[2]:
                # a batch without an id (`CdcSink.write`): the writer's newest one is kept
                batch_header = p[2].get(HEADER_BATCH)
                key = (p[2][HEADER_WRITER].decode(), int(batch_header) if batch_header else None)
                batches[key] = p[:2]
                if HEADER_BATCH_LOWER in p[2]:  # one of several statements: the batch's interval
                    batch_upper = p[2].get(HEADER_BATCH_UPPER, b"")
                    batches[key] = (
                        int(p[2][HEADER_BATCH_LOWER]),
                        int(batch_upper) if batch_upper else None,
                    )
                if p[2].get(HEADER_DIGEST):
                    digests[key] = p[2][HEADER_DIGEST].decode()
            if best is None or best[1] is not None and (p[1] is None or p[1] > best[1]):
                best = p
        # done when partition 0 shows a statement, or every partition was read to its start
        # (a partition with fewer than n records in the window has no more)
        far_enough = back_to is None or lowest_p0 is not None and lowest_p0 <= back_to
        if found_p0 and far_enough or all(k < n for k in per_partition.values()):
            break
        if per_partition.get(0, 0) < n and (best is not None or found_p0):
            break
        n *= 8
    update_sample = None if sample is None else sample[1]
    partition0_end = ends.get(0)
    if best is None:
        return TopicFrontier(
            0, update_sample=update_sample, partition0_end=partition0_end, foreign=foreign
        )
    lower, upper, h = best
    batch = h.get(HEADER_BATCH)
    return TopicFrontier(
        upper,
        (h.get(HEADER_WRITER) or b"").decode() or None,
        int(batch) if batch else None,
        lower,
        upper,
        True,
        batches,
        schema=schema,
        update_sample=update_sample,
        digests=digests,
        partition0_end=partition0_end,
        shape=shape.decode() if shape else None,
        foreign=foreign,
    )
