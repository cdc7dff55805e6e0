"""The verifying consumer: reads a CDCv2 topic back and proves it exact, or says what is wrong.

:func:`verify_topic` reads every partition of a topic from its first offset (partitions are
*assigned*: no consumer group, no commits, no side effect on the cluster), decodes each message
with a :class:`~cdc_emitter.codec.CdcCodec`, and feeds a :class:`~cdc_emitter.core.CdcReader`
with the message's partition and offset. The reader removes duplicates, restores order and
advances its frontier only over times the progress chain proves complete; everything it finds
wrong is a violation in the result, never an exception. A message that cannot be decoded is a
violation of kind ``undecodable`` naming its partition and offset, and reading goes on.

When it stops:

* ``until_frontier=N``: as soon as the frontier is ``>= (N,)`` or closed;
  ``until_closed=True``: as soon as the frontier is ``()`` (the history is closed). With a target
  it follows new messages after the end of the topic until the target is reached or ``timeout``
  seconds have passed (no timeout: it waits as long as it takes).
* no target: it reads what is in the topic now (the end offsets seen at the start) and stops
  there, or when ``timeout`` expires first.

``VerifyResult.reached`` says whether the target (or, without one, the end of the topic) was
reached. Memory: the reader's state beyond its frontier, plus the collection at the frontier
(``keep_collection``) and the history (``keep_history``) when asked for.

No Spark here: this module imports confluent-kafka and the pure protocol modules only.
"""

from __future__ import annotations

import gc
import time as _time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from .core import CdcReader, Update, Violation
from .errors import BrokerError, DecodeError
from .kafka_io import BROKER_DOWN_TIMEOUT, _open_reader, _watermarks, METADATA_TIMEOUT

__all__ = ["VerifyResult", "VerifyProgress", "verify_topic", "reached_target"]

_TRANSIENT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}
#: Seconds between two ``on_progress`` calls.
PROGRESS_INTERVAL = 0.5
#: Allocations between two young-generation garbage collections while verifying.
GC_THRESHOLD = 200_000


class VerifyProgress(NamedTuple):
    """What ``on_progress`` is told while reading."""

    messages: int
    updates: int
    frontier: tuple[int, ...]
    lag: int | None  # messages known to be in the topic and not yet read (None: unknown)
    elapsed: float


@dataclass
class VerifyResult:
    """The outcome of :func:`verify_topic`.

    ``collection`` maps data (a tuple in field order) to its multiplicity at the frontier (zero
    counts dropped); ``history`` holds every reported update in time order (data sorted within a
    time) when ``keep_history`` was asked for. ``updates`` counts the updates received (with
    duplicates); ``duplicates`` those dropped as duplicates.
    """

    frontier: tuple[int, ...]
    messages: int = 0
    updates: int = 0
    duplicates: int = 0
    violations: list[Violation] = field(default_factory=list)
    collection: dict[Any, int] | None = None
    history: list[Update] | None = None
    reached: bool = False
    target: tuple[int, ...] | None = None  # (N,), () for closed, None: the end of the topic

    @property
    def ok(self) -> bool:
        """True when there is no violation and the target was reached."""
        return self.reached and not self.violations

    def summary(self) -> dict:
        """The JSON summary of the CLI: frontier, messages, updates, duplicates, violations."""
        return {
            "frontier": list(self.frontier),
            "messages": self.messages,
            "updates": self.updates,
            "duplicates": self.duplicates,
            "violations": [v.to_dict() for v in self.violations],
        }


def reached_target(frontier: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``frontier`` has reached ``target`` (``()`` as a target means closed)."""
    if frontier == ():
        return True
    if target == ():
        return False
    return frontier[0] >= target[0]


def verify_topic(
    bootstrap_servers: str,
    topic: str,
    codec: Any,
    *,
    until_frontier: int | None = None,
    until_closed: bool = False,
    timeout: float | None = None,
    config: Mapping[str, Any] | None = None,
    on_progress: Callable[[VerifyProgress], None] | None = None,
    keep_collection: bool = True,
    keep_history: bool = False,
    start: int = 0,
) -> VerifyResult:
    """Read ``topic`` from the beginning of every partition and verify it (see the module doc).

    Raises :class:`~cdc_emitter.errors.BrokerError` when the cluster cannot be reached or the
    topic does not exist, :class:`~cdc_emitter.errors.ConfigError` for an unusable client
    configuration. Protocol problems are never raised: they are ``result.violations``.
    """
    if until_frontier is not None and until_closed:
        raise ValueError("until_frontier and until_closed exclude each other")
    if until_frontier is not None and until_frontier < 0:
        raise ValueError(f"until_frontier must be a non-negative time, got {until_frontier}")
    target: tuple[int, ...] | None = (
        () if until_closed else (None if until_frontier is None else (until_frontier,))
    )
    began = _time.monotonic()
    deadline = None if timeout is None else began + timeout

    reader = CdcReader(start)
    collection: dict[Any, int] | None = {} if keep_collection else None
    history: list[Update] | None = [] if keep_history else None
    sort_key = codec.sort_key

    def take(finished: list[Update]) -> None:
        if history is not None:
            history.extend(sorted(finished, key=lambda u: (u.time, sort_key(u.data))))
        if collection is not None:
            get = collection.get
            for data, _time_, diff in finished:
                count = get(data, 0) + diff
                if count:
                    collection[data] = count
                else:
                    del collection[data]

    decode = codec.decode
    push = reader.push

    consumer, parts = _open_reader(bootstrap_servers, topic, config)
    # Millions of small tuples and dicts, no reference cycles: the cyclic garbage collector's
    # frequent passes over the growing state cost more than decoding (measured: up to 40%).
    # Collect rarely while verifying; the previous thresholds come back afterwards.
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], GC_THRESHOLD), max(thresholds[1], 50), max(thresholds[2], 100))
    try:
        marks = _watermarks(consumer, bootstrap_servers, topic, parts, METADATA_TIMEOUT)
        ends = {p: high for p, (_low, high) in marks.items()}
        next_offset = {p: low for p, (low, _high) in marks.items()}
        pending = {p for p, (low, high) in marks.items() if high > low}  # not yet read to the end
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        down_since: float | None = None
        last_report = began

        def report(now: float) -> None:
            lag = 0
            for p in parts:
                try:
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=0.1, cached=True
                    )
                except KafkaException:
                    high = -1
                high = max(high, ends.get(p, 0))
                lag += max(0, high - next_offset[p])
            on_progress(VerifyProgress(reader.messages, reader.updates_received, reader.frontier,
                                       lag, now - began))

        reached = False
        while True:
            if target is not None and reached_target(reader.frontier, target):
                reached = True
                break
            if target is None and not pending:
                reached = True
                break
            wait = 0.5
            now = _time.monotonic()
            if deadline is not None:
                left = deadline - now
                if left <= 0:
                    break
                wait = min(wait, left)
            if on_progress is not None and now - last_report >= PROGRESS_INTERVAL:
                last_report = now
                report(now)
            # drain what is buffered without waiting; block (up to `wait`) only when nothing is
            batch = consumer.consume(num_messages=500, timeout=0) or consumer.consume(1, wait)
            for msg in batch:
                err = msg.error()
                if err is not None:
                    p = msg.partition()
                    code = err.code()
                    if code == KafkaError._PARTITION_EOF:
                        if msg.offset() >= ends.get(p, 0):
                            pending.discard(p)
                        continue
                    if code in _TRANSIENT and not err.fatal():
                        down_since = down_since or _time.monotonic()
                        if _time.monotonic() - down_since > BROKER_DOWN_TIMEOUT:
                            raise BrokerError(
                                f"reading topic {topic!r} on {bootstrap_servers}: broker "
                                f"unreachable for more than {BROKER_DOWN_TIMEOUT:g}s: {err.str()}"
                            )
                        continue
                    where = f"partition {p}" if p is not None and p >= 0 else "(no partition)"
                    raise BrokerError(
                        f"error reading topic {topic!r} {where} on {bootstrap_servers}: "
                        f"{err.str()} [{err.name()}]"
                    )
                down_since = None
                p = msg.partition()
                off = msg.offset()
                next_offset[p] = off + 1
                if p in pending and off >= ends[p] - 1:
                    pending.discard(p)
                value = msg.value()
                try:
                    if value is None:
                        raise DecodeError("the message has no value (a tombstone)")
                    message = decode(value)
                except DecodeError as exc:
                    reader.messages += 1
                    reader.violate("undecodable", None, f"partition {p} offset {off}: {exc}",
                                   partition=p, offset=off)
                    continue
                for finished, _frontier in push(message, partition=p, offset=off):
                    if finished:
                        take(finished)
            if target is None and not pending:
                continue  # loop head stops
        if on_progress is not None:
            report(_time.monotonic())
    finally:
        gc.set_threshold(*thresholds)
        consumer.close()

    return VerifyResult(
        frontier=reader.frontier,
        messages=reader.messages,
        updates=reader.updates_received,
        duplicates=reader.duplicates,
        violations=list(reader.violations),
        collection=collection,
        history=history,
        reached=reached,
        target=target,
    )
