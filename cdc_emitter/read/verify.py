"""The verifying consumer: reads a CDCv2 topic back and proves it exact, or says what is wrong.

`verify_topic` reads every partition of a topic from its first offset (a
`TopicScan`: no consumer group, no commits, no side effect on the
cluster), decodes each message with a `CdcCodec`, and feeds a
`CdcReader` with the message's partition and offset. The reader removes
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
worker processes (`cdc_emitter.read.decode_pool`) while this process reads Kafka and runs the
reader, which sees the messages in the same order either way.

Memory: the reader's state beyond its frontier and its statement ledger, the collection at the
frontier (``keep_collection``) and the history (``keep_history``) when asked for, and what
``strict`` remembers. Updates held beyond a frontier that does not move are reported through
``on_warning`` at ``warn_held`` updates and at every doubling after it.

Headers: a progress statement's message headers go to the reader with it, so ``pending`` names
the writer and batch of each statement whose counted updates are not all there
(`cdc_emitter.protocol.reader.Waiting`).
Only the headers of messages not marked as updates are kept, until their message is decoded.

Isolation: the topic is read with ``isolation.level=read_committed``
(`cdc_emitter.kafka.config.consumer_config`): a claim in an aborted transaction is never read.

No Spark here, and no Kafka client either: this module reads through `cdc_emitter.kafka.reading`.
"""

from __future__ import annotations

import gc
import logging
import time as _time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from cdc_emitter.kafka.config import BROKER_TIMEOUT
from cdc_emitter.kafka.reading import TopicScan
from cdc_emitter.protocol.headers import marks_updates
from cdc_emitter.protocol.reader import CdcReader, Pending, Strict
from cdc_emitter.protocol.updates import Update, Violation
from cdc_emitter.read.decode_pool import (
    CHUNK_BYTES,
    PARALLEL_MIN_BYTES,
    DecodePool,
    Entry,
    decode_chunk,
    default_workers,
    feed_decoded,
)

if TYPE_CHECKING:
    from cdc_emitter.protocol.codec import CdcCodec

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
    lag: int | None  # messages known to be in the topic and not read yet (None: unknown)
    elapsed: float


#: What a result's ``collection`` holds: ``dict`` here, a DataFrame for ``read_cdc``.
CollectionT = TypeVar("CollectionT")
#: What a result's ``history`` holds: ``list`` here, a DataFrame for ``read_cdc``.
HistoryT = TypeVar("HistoryT")


@dataclass
class VerifyResult(Generic[CollectionT, HistoryT]):
    """The outcome of `verify_topic`, and of `read_cdc` as `CdcRead`.

    Attributes:
        frontier: ``(t,)``: every time below ``t`` is proven; ``()``: the history is closed.
        messages: Messages read.
        updates: Updates received, duplicates included.
        duplicates: Updates dropped as duplicates.
        violations: Every protocol violation found, in reading order.
        collection: Data (a tuple in field order) mapped to its multiplicity at the frontier,
            zero counts dropped; None unless ``keep_collection``.
        history: Every reported update in time order, data sorted within a time; None unless
            ``keep_history``.
        reached: Whether the target, or without one the end of the topic, was reached.
        target: ``(N,)``, ``()`` for closed, or None for the end of the topic.
        pending: What keeps the frontier where it is.
        hints: The likely causes of undecodable messages.
        warnings: What was said through ``on_warning``.
        workers: Decode worker processes used (0: decoded in this process).
    """

    frontier: tuple[int, ...]
    messages: int = 0
    updates: int = 0
    duplicates: int = 0
    violations: list[Violation] = field(default_factory=list)
    collection: CollectionT | None = None
    history: HistoryT | None = None
    reached: bool = False
    target: tuple[int, ...] | None = None
    pending: Pending | None = None
    hints: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    workers: int = 0

    @property
    def verdict(self) -> str:
        """One of `VERDICTS`.

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
    the first `DIAGNOSED` such messages (appended to ``hints``)."""

    def __init__(self, reader: CdcReader, codec: CdcCodec, hints: list[str]) -> None:
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


#: What `verify_topic` returns: the collection as a dict, the history as a list.
LocalResult = VerifyResult[dict[Any, int], list[Update]]


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
    codec: CdcCodec,
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
) -> LocalResult:
    """Read a topic from the beginning of every partition and verify it.

    The module docstring says when reading stops and what "verified" means.

    Args:
        bootstrap_servers: The Kafka servers, as ``host:port,host:port``.
        topic: The topic to read.
        codec: Decodes the messages (data schema and framing of the topic).
        until_frontier: Read until the frontier reaches this time, following the topic.
        until_closed: Read until the history is closed (frontier ``()``), following the topic.
        timeout: Seconds to read at most; None waits as long as it takes.
        config: librdkafka client settings (security and the like).
        on_progress: Called about every `PROGRESS_INTERVAL` seconds, and once at the end.
        on_warning: Called with each memory warning; None logs them instead.
        keep_collection: Keep the collection at the frontier in `VerifyResult.collection`.
        keep_history: Keep every reported update in `VerifyResult.history`.
        start: The time the topic's history starts at.
        strict: ``"exact"`` or ``"bloom"`` to check late updates (see `CdcReader`).
        bloom_error_rate: The Bloom filter's false-positive rate for ``strict="bloom"``.
        workers: Decode processes. None: one per core once the topic proves large; 0: none;
            N: N from the start.
        warn_held: Held updates at which the first memory warning is given.
        broker_timeout: Seconds to wait for a broker that does not answer (metadata, offsets,
            or no progress while reading) before raising.

    Returns:
        What the reading found. Protocol problems are never raised: they are
        ``result.violations``.

    Raises:
        BrokerError: The cluster cannot be reached, or the topic does not exist.
        ConfigError: The client configuration cannot be used.
        ValueError: ``until_frontier`` and ``until_closed`` are both given, or
            ``until_frontier`` or ``workers`` is negative.
    """
    target = _target(until_frontier, until_closed)
    began = _time.monotonic()
    deadline = None if timeout is None else began + timeout
    max_workers = default_workers() if workers is None else workers
    if max_workers < 0:
        raise ValueError(f"workers must be >= 0 or None, got {workers}")

    run = _Verification(
        codec,
        CdcReader(
            start,
            strict=strict,
            bloom_error_rate=bloom_error_rate,
            report_updates=keep_collection or keep_history,
        ),
        keep_collection=keep_collection,
        keep_history=keep_history,
        warn_held=warn_held,
        on_warning=on_warning,
        max_workers=max_workers,
    )
    with _rare_gc():
        try:
            with TopicScan(bootstrap_servers, topic, config, broker_timeout) as scan:
                reached = run.read(scan, target, deadline, began, on_progress, workers)
        finally:
            run.close_pool()
    return run.result(reached, target)


def _target(until_frontier: int | None, until_closed: bool) -> tuple[int, ...] | None:
    """The frontier to read up to: ``(N,)``, ``()`` for closed, None for the end of the topic."""
    if until_frontier is not None and until_closed:
        raise ValueError("until_frontier and until_closed exclude each other")
    if until_frontier is not None and until_frontier < 0:
        raise ValueError(f"until_frontier must be a non-negative time, got {until_frontier}")
    return () if until_closed else (None if until_frontier is None else (until_frontier,))


@contextmanager
def _rare_gc() -> Iterator[None]:
    """Young-generation garbage collections at most every `GC_THRESHOLD` allocations.

    Millions of small tuples and dicts, no reference cycles: the cyclic garbage collector's
    frequent passes over the growing state cost more than decoding (measured: up to 40%).
    The previous thresholds come back afterwards.
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(
        max(thresholds[0], GC_THRESHOLD), max(thresholds[1], 50), max(thresholds[2], 100)
    )
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


class _Verification:
    """One run of `verify_topic`: the reader, what is kept of its output, and the decoding.

    Messages are decoded a chunk at a time, in this process or by a `DecodePool`, which starts
    once what is still to read makes its workers worth their start-up.
    """

    def __init__(
        self,
        codec: CdcCodec,
        reader: CdcReader,
        *,
        keep_collection: bool,
        keep_history: bool,
        warn_held: int,
        on_warning: Callable[[str], None] | None,
        max_workers: int,
    ) -> None:
        self.codec, self.reader = codec, reader
        self.collection: dict[Any, int] | None = {} if keep_collection else None
        self.history: list[Update] | None = [] if keep_history else None
        self.hints: list[str] = []
        self.warnings: list[str] = []
        self.next_warning = warn_held  # held updates at which the next warning is given
        self.on_warning = on_warning
        self.report_undecodable = UndecodableReport(reader, codec, self.hints)
        self.max_workers = max_workers
        self.pool: DecodePool | None = None
        self.used_workers = 0
        self.chunk: list[tuple[int, int, bytes | None]] = []  # read, not yet decoded
        # (partition, offset) -> headers of a message read and not yet handed to the reader,
        # unless the headers mark it as updates (a sink's update messages)
        self.headers: dict[tuple[int, int], list] = {}
        self.chunk_bytes = 0
        self.done_bytes = self.done_messages = 0  # decoded in this process

    # -- the reader's output ----------------------------------------------------------------

    def take(self, finished: list[Update]) -> None:
        """Add updates the reader reported to the history and the collection kept."""
        history, collection = self.history, self.collection
        if history is not None:
            sort_key = self.codec.sort_key
            history.extend(sorted(finished, key=lambda u: (u.time, sort_key(u.data))))
        if collection is not None:
            get = collection.get
            for data, _, diff in finished:
                count = get(data, 0) + diff
                if count:
                    collection[data] = count
                else:
                    del collection[data]

    def feed(self, partition: int, offset: int, message: Any, headers: Any = None) -> None:
        """Push one decoded message to the reader and keep what it reports."""
        for finished, _frontier in self.reader.push(
            message, partition=partition, offset=offset, headers=headers
        ):
            if finished:
                self.take(finished)

    def keep_headers(self, partition: int, offset: int, headers: list) -> None:
        """Keep a message's headers for the reader, unless they mark it as updates."""
        if not marks_updates(headers):
            self.headers[(partition, offset)] = headers

    def undecodable(self, partition: int, offset: int, value: bytes | None, error: str) -> None:
        """Count a message that does not decode and report it as a violation."""
        self.reader.messages += 1
        self.report_undecodable(partition, offset, value, error)

    def handle(self, entries: list[Entry]) -> None:
        """Feed the reader a decoded chunk, in order, then warn if it holds too much."""
        feed_decoded(entries, self.headers, self.feed, self.undecodable)
        self.warn_if_held()

    def warn_if_held(self) -> None:
        """Warn once the held updates reach `next_warning`, and at every doubling after it."""
        reader = self.reader
        held = reader.held
        if held < self.next_warning:
            return
        self.next_warning = max(self.next_warning * 2, held + 1)
        p = reader.pending()
        times = ", ".join(map(str, p.times)) + (", ..." if len(p.times) == 20 else "")
        text = (
            f"{held:,} updates are held beyond frontier {list(reader.frontier)} (at times "
            f"{times}): no progress statement proves them complete yet, and memory grows with "
            "them until one does"
        )
        self.warnings.append(text)
        if self.on_warning is not None:
            self.on_warning(text)
        else:
            log.warning("%s", text)

    # -- decoding ---------------------------------------------------------------------------

    def start_pool(self, workers: int) -> None:
        self.pool = DecodePool(self.codec, workers)
        self.used_workers = workers

    def close_pool(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def dispatch(self, scan: TopicScan) -> None:
        """Hand the chunk to the workers, or decode it here; the workers start once what is
        still to read makes them worth their start-up."""
        if self.pool is not None:
            self.pool.submit(self.chunk)
        else:
            self.handle(decode_chunk(self.codec, self.chunk, rows=False))
            self.done_bytes += self.chunk_bytes
            self.done_messages += len(self.chunk)
            left = scan.messages_at_start - self.done_messages
            if (
                self.max_workers
                and left * self.done_bytes / self.done_messages >= PARALLEL_MIN_BYTES
            ):
                self.start_pool(self.max_workers)
        self.chunk, self.chunk_bytes = [], 0

    # -- reading ----------------------------------------------------------------------------

    def read(
        self,
        scan: TopicScan,
        target: tuple[int, ...] | None,
        deadline: float | None,
        began: float,
        on_progress: Callable[[VerifyProgress], None] | None,
        workers: int | None,
    ) -> bool:
        """Read ``scan`` until ``target`` (None: the end offsets at the start) or ``deadline``.

        Returns whether the target was reached.
        """
        if workers:  # asked for: no size estimate first
            self.start_pool(workers)
        last_report = began
        reached = False
        while True:
            if self._reached(scan, target):
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
                on_progress(self._progress(scan, now - began))
            pool = self.pool
            if pool is not None and (
                pool.in_flight >= pool.max_in_flight
                or (target is None and not scan.pending and not self.chunk)
            ):
                self.handle(pool.next_result())  # workers are behind: wait for the oldest chunk
                continue
            self._read_some(scan, wait)
        if on_progress is not None:
            on_progress(self._progress(scan, _time.monotonic() - began))
        return reached

    def _reached(self, scan: TopicScan, target: tuple[int, ...] | None) -> bool:
        """Whether the reader reached ``target``, or, without one, everything read is handled."""
        if target is not None and reached_target(self.reader.frontier, target):
            return True
        pool = self.pool
        idle = not scan.pending and not self.chunk and (pool is None or not pool.in_flight)
        return target is None and idle

    def _read_some(self, scan: TopicScan, wait: float) -> None:
        """Poll the topic once (up to ``wait`` seconds), dispatch full chunks, take results."""
        pool = self.pool
        records = scan.poll(
            0 if pool is not None and pool.in_flight else wait, POLL_RECORDS, self.keep_headers
        )
        for record in records:
            self.chunk.append(record)
            self.chunk_bytes += len(record[2] or b"")
            if self.chunk_bytes >= CHUNK_BYTES:
                self.dispatch(scan)
        if self.chunk and len(records) < POLL_RECORDS:  # nothing more buffered: do not sit on it
            self.dispatch(scan)
        pool = self.pool  # dispatching may have started it
        if pool is not None:
            if not records and pool.in_flight:
                self.handle(pool.next_result())  # nothing to read: wait for the workers
            while pool.ready():
                self.handle(pool.next_result())

    def _progress(self, scan: TopicScan, elapsed: float) -> VerifyProgress:
        reader = self.reader
        return VerifyProgress(
            reader.messages, reader.updates_received, reader.frontier, scan.lag(), elapsed
        )

    def result(self, reached: bool, target: tuple[int, ...] | None) -> LocalResult:
        reader = self.reader
        return VerifyResult(
            frontier=reader.frontier,
            messages=reader.messages,
            updates=reader.updates_received,
            duplicates=reader.duplicates,
            violations=list(reader.violations),
            collection=self.collection,
            history=self.history,
            reached=reached,
            target=target,
            pending=reader.pending(),
            hints=self.hints,
            warnings=self.warnings,
            workers=self.used_workers,
        )
