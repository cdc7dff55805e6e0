"""The verifying consumer: reads a CDCv2 topic back and proves it exact, or says what is wrong.

:func:`verify_topic` reads every partition of a topic from its first offset (a
:class:`~cdc_emitter.kafka.reading.TopicScan`: no consumer group, no commits, no side effect on the
cluster), decodes each message with a :class:`~cdc_emitter.protocol.codec.CdcCodec`, and feeds a
:class:`~cdc_emitter.protocol.reader.CdcReader` with the message's partition and offset. The reader removes
duplicates, restores order, checks every progress statement against every other, and advances
its frontier only over times the progress chain proves complete; everything it finds wrong is a
violation in the result, never an exception. A message that cannot be decoded is a violation of
kind ``undecodable`` naming its partition and offset, and reading goes on; the likely cause (the
framing, the data schema) is said once, in ``hints``.

When it stops:

* ``until_frontier=N``: as soon as the frontier is ``>= (N,)`` or closed;
  ``until_closed=True``: as soon as the frontier is ``()`` (the history is closed). With a target
  it follows new messages after the end of the topic until the target is reached or ``timeout``
  seconds have passed (no timeout: it waits as long as it takes).
* no target: it reads what is in the topic now (the end offsets seen at the start) and stops
  there, or when ``timeout`` expires first.

"Verified" means proven (``VerifyResult.verdict``): without a target, the end of the topic must
leave nothing unproven — an empty topic, updates no progress statement covers, a count the topic
does not hold or a gap in the progress chain each make the verdict ``"empty"`` or
``"incomplete"``, with ``pending`` saying what waits.

Speed: decoding is most of the work and needs no shared state, so on a machine with two cores or
more, once the topic proves large (``PARALLEL_MIN_BYTES`` still to read), messages are decoded in
worker processes (:mod:`cdc_emitter.read.decode_pool`) while this process reads Kafka and runs the
reader, which sees the messages in the same order either way.

Memory: the reader's state beyond its frontier and its statement ledger, the collection at the
frontier (``keep_collection``) and the history (``keep_history``) when asked for, and what
``strict`` remembers. Updates held beyond a frontier that does not move are reported through
``on_warning`` at ``warn_held`` updates and at every doubling after it.

No Spark here, and no Kafka client either: this module reads through :mod:`cdc_emitter.kafka.reading`.
"""

from __future__ import annotations

import gc
import logging
import time as _time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cdc_emitter.kafka.config import BROKER_TIMEOUT
from cdc_emitter.kafka.reading import TopicScan
from cdc_emitter.protocol.reader import CdcReader, Pending, Strict
from cdc_emitter.protocol.updates import Progress, Update, Violation
from cdc_emitter.read.decode_pool import PROGRESS, ROWS, DecodePool, decode_chunk, default_workers

__all__ = [
    "VerifyResult",
    "VerifyProgress",
    "verify_topic",
    "reached_target",
    "UndecodableReport",
    "VERDICTS",
]

log = logging.getLogger(__name__)

#: Seconds between two ``on_progress`` calls.
PROGRESS_INTERVAL = 0.5
#: Allocations between two young-generation garbage collections while verifying.
GC_THRESHOLD = 200_000
#: Bytes still to read (estimated) that make starting decode workers worth their start-up.
PARALLEL_MIN_BYTES = 16 << 20
#: Bytes of message values per chunk a decode worker takes.
CHUNK_BYTES = 1 << 20
#: Records one poll of the topic hands over at most.
POLL_RECORDS = 500
#: Held updates (beyond the frontier) at which the first memory warning is given.
WARN_HELD = 1_000_000
#: Undecodable messages whose likely cause is looked for (the cause is said once per kind).
DIAGNOSED = 10

#: ``VerifyResult.verdict`` values, best first.
VERDICTS = ("verified", "violations", "incomplete", "empty", "not_reached")


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
    duplicates); ``duplicates`` those dropped as duplicates. ``pending`` says what keeps the
    frontier where it is; ``hints`` the likely causes of undecodable messages; ``warnings``
    what was said through ``on_warning``.
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
    pending: Pending | None = None
    hints: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    workers: int = 0  # decode worker processes used (0: decoded in this process)

    @property
    def verdict(self) -> str:
        """One of :data:`VERDICTS`.

        ``violations`` wins over everything else; ``not_reached``: the target, or without one the
        end of the topic, was not reached in time; ``empty``: the topic holds no message;
        ``incomplete``: without a target, the end of the topic leaves something unproven
        (see ``pending``); ``verified``: none of these.
        """
        if self.violations:
            return "violations"
        if not self.reached:
            return "not_reached"
        if self.target is None:
            if self.messages == 0:
                return "empty"
            if self.pending is not None and not self.pending.empty:
                return "incomplete"
        return "verified"

    @property
    def ok(self) -> bool:
        """True when the history read is proven: no violation, nothing left unproven."""
        return self.verdict == "verified"

    def summary(self) -> dict:
        """The JSON summary of the CLI: frontier, messages, updates, duplicates, violations, and
        the verdict with what is pending and the hints."""
        return {
            "frontier": list(self.frontier),
            "messages": self.messages,
            "updates": self.updates,
            "duplicates": self.duplicates,
            "violations": [v.to_dict() for v in self.violations],
            "verdict": self.verdict,
            "pending": None if self.pending is None else self.pending.to_dict(),
            "hints": list(self.hints),
        }


class UndecodableReport:
    """How a message that does not decode is reported (by either engine): a violation naming its
    partition and offset with the codec's error, and the likely cause, said once, looked for in
    the first :data:`DIAGNOSED` such messages (appended to ``hints``)."""

    def __init__(self, reader: CdcReader, codec: Any, hints: list[str]) -> None:
        self.reader, self.codec, self.hints = reader, codec, hints
        self.seen = 0

    def __call__(self, partition: int, offset: int, value: bytes | None, error: str) -> None:
        self.reader.violate(
            "undecodable",
            None,
            f"partition {partition} offset {offset}: {error}",
            partition=partition,
            offset=offset,
        )
        self.seen += 1
        if value is not None and self.seen <= DIAGNOSED:
            hint = self.codec.diagnose(value)
            if hint is not None and hint not in self.hints:
                self.hints.append(hint)


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
    on_warning: Callable[[str], None] | None = None,
    keep_collection: bool = True,
    keep_history: bool = False,
    start: int = 0,
    strict: Strict | None = None,
    bloom_error_rate: float = 0.001,
    workers: int | None = None,
    warn_held: int = WARN_HELD,
    broker_timeout: float = BROKER_TIMEOUT,
) -> VerifyResult:
    """Read ``topic`` from the beginning of every partition and verify it (see the module doc).

    ``strict``: ``"exact"`` or ``"bloom"`` (see :class:`~cdc_emitter.protocol.reader.CdcReader`).
    ``workers``: decode processes (None: one per core once the topic proves large; 0: none;
    N: N from the start). ``broker_timeout``: seconds to wait for a broker that does not answer
    (metadata, offsets, or no progress while reading) before raising.
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
    max_workers = default_workers() if workers is None else workers
    if max_workers < 0:
        raise ValueError(f"workers must be >= 0 or None, got {workers}")

    reader = CdcReader(start, strict=strict, bloom_error_rate=bloom_error_rate)
    collection: dict[Any, int] | None = {} if keep_collection else None
    history: list[Update] | None = [] if keep_history else None
    hints: list[str] = []
    warnings: list[str] = []
    sort_key = codec.sort_key
    push = reader.push
    next_warning = warn_held

    def take(finished: list[Update]) -> None:
        if history is not None:
            history.extend(sorted(finished, key=lambda u: (u.time, sort_key(u.data))))
        if collection is not None:
            get = collection.get
            for data, _, diff in finished:
                count = get(data, 0) + diff
                if count:
                    collection[data] = count
                else:
                    del collection[data]

    def feed(partition: int, offset: int, message: Any) -> None:
        for finished, _frontier in push(message, partition=partition, offset=offset):
            if finished:
                take(finished)

    report_undecodable = UndecodableReport(reader, codec, hints)

    def undecodable(partition: int, offset: int, value: bytes | None, error: str) -> None:
        reader.messages += 1
        report_undecodable(partition, offset, value, error)

    def warn_if_held() -> None:
        nonlocal next_warning
        held = reader.held
        if held < next_warning:
            return
        next_warning = max(next_warning * 2, held + 1)
        p = reader.pending()
        times = ", ".join(map(str, p.times)) + (", ..." if len(p.times) == 20 else "")
        text = (
            f"{held:,} updates are held beyond frontier {list(reader.frontier)} (at times "
            f"{times}): no progress statement proves them complete yet, and memory grows with "
            "them until one does"
        )
        warnings.append(text)
        if on_warning is not None:
            on_warning(text)
        else:
            log.warning("%s", text)

    # Millions of small tuples and dicts, no reference cycles: the cyclic garbage collector's
    # frequent passes over the growing state cost more than decoding (measured: up to 40%).
    # Collect rarely while verifying; the previous thresholds come back afterwards.
    thresholds = gc.get_threshold()
    gc.set_threshold(
        max(thresholds[0], GC_THRESHOLD), max(thresholds[1], 50), max(thresholds[2], 100)
    )
    pool: DecodePool | None = None
    used_workers = 0
    try:
        with TopicScan(bootstrap_servers, topic, config, broker_timeout) as scan:
            if workers:  # asked for: no size estimate first
                pool = DecodePool(codec, workers)
                used_workers = workers
            last_report = began
            done_bytes = done_messages = 0  # decoded in this process
            chunk: list[tuple[int, int, bytes | None]] = []
            chunk_bytes = 0

            def dispatch() -> None:
                """Hand the chunk to the workers, or decode it here; the workers start once what
                is still to read makes them worth their start-up."""
                nonlocal pool, chunk, chunk_bytes, done_bytes, done_messages, used_workers
                if pool is not None:
                    pool.submit(chunk)
                else:
                    handle(decode_chunk(codec, chunk, rows=False))
                    done_bytes += chunk_bytes
                    done_messages += len(chunk)
                    left = scan.messages_at_start - done_messages
                    if max_workers and left * done_bytes / done_messages >= PARALLEL_MIN_BYTES:
                        pool = DecodePool(codec, max_workers)
                        used_workers = max_workers
                chunk, chunk_bytes = [], 0

            def handle(entries: list[tuple]) -> None:
                for kind, p, off, payload in entries:
                    if kind == ROWS:
                        feed(p, off, payload)
                    elif kind == PROGRESS:
                        feed(p, off, Progress(*payload))
                    else:
                        undecodable(p, off, payload[1], payload[0])
                warn_if_held()

            reached = False
            while True:
                if target is not None and reached_target(reader.frontier, target):
                    reached = True
                    break
                idle = not scan.pending and not chunk and (pool is None or not pool.in_flight)
                if target is None and idle:
                    reached = True
                    break
                now = _time.monotonic()
                wait = 0.5
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        break
                    wait = min(wait, left)
                if on_progress is not None and now - last_report >= PROGRESS_INTERVAL:
                    last_report = now
                    on_progress(
                        VerifyProgress(
                            reader.messages,
                            reader.updates_received,
                            reader.frontier,
                            scan.lag(),
                            now - began,
                        )
                    )
                if pool is not None and (
                    pool.in_flight >= pool.max_in_flight
                    or (target is None and not scan.pending and not chunk)
                ):
                    handle(pool.next_result())  # workers are behind: wait for the oldest chunk
                    continue
                records = scan.poll(
                    0 if pool is not None and pool.in_flight else wait, POLL_RECORDS
                )
                for record in records:
                    chunk.append(record)
                    chunk_bytes += len(record[2] or b"")
                    if chunk_bytes >= CHUNK_BYTES:
                        dispatch()
                if chunk and len(records) < POLL_RECORDS:  # nothing more buffered: do not sit on it
                    dispatch()
                if pool is not None:
                    if not records and pool.in_flight:
                        handle(pool.next_result())  # nothing to read: wait for the workers
                    while pool.ready():
                        handle(pool.next_result())
            if on_progress is not None:
                now = _time.monotonic()
                on_progress(
                    VerifyProgress(
                        reader.messages,
                        reader.updates_received,
                        reader.frontier,
                        scan.lag(),
                        now - began,
                    )
                )
    finally:
        if pool is not None:
            pool.close()
        gc.set_threshold(*thresholds)

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
        pending=reader.pending(),
        hints=hints,
        warnings=warnings,
        workers=used_workers,
    )
