"""Following a CDCv2 topic time by time: what a streaming consumer delivers.

`TopicFollower` reads a topic from its first offset with the reader (`CdcReader`) and hands out
the consolidated updates of each time as soon as the progress chain proves it complete, each
time once, never one of an open time. Its position is the frontier: every time below it has
been handed out. `replay` gives the updates of a range of times again, read afresh, for a
consumer that restarts.

Guarantees:

* `advance` returns exactly the updates of the times between the frontier before and after
  it, consolidated (one update per data and time, no zero diff), duplicates dropped;
* the messages are fed to the reader in the order they were read, whether this process decoded
  them or decode workers did (a `DecodePool`, started as `verify_topic` starts one: once the
  messages still to read at the start of the topic make them worth their start-up);
* memory holds only the updates of open times (those at or beyond the frontier); once they
  reach `WARN_HELD`, and at every doubling after, a warning says so on the
  ``cdc_emitter.read.follow`` logger;
* a protocol violation (a count disagreement, an over-count, an undecodable message, ...)
  raises `ViolationError` naming the topic, partition, offset and time, as ``verify`` reports
  it, and nothing more is handed out. A violation found while its time is open stops that time
  from ever being handed out; one found later (a statement that contradicts the count of a
  time handed out already) stops the stream after it. As with ``verify`` without ``strict``,
  a late update at a time handed out already is taken for a duplicate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from cdc_emitter.errors import DecodeError, ViolationError
from cdc_emitter.kafka.config import BROKER_TIMEOUT
from cdc_emitter.kafka.reading import TopicScan
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.headers import marks_updates
from cdc_emitter.protocol.reader import CdcReader
from cdc_emitter.protocol.updates import Update, Violation
from cdc_emitter.read.decode_pool import (
    CHUNK_BYTES,
    PARALLEL_MIN_BYTES,
    DecodePool,
    Entry,
    default_workers,
    feed_decoded,
)
from cdc_emitter.read.verify import UndecodableReport

#: How long `advance` waits for a message once the topic has gone quiet (at most until its
#: ``max_seconds`` are up).
IDLE_WAIT = 0.2
#: Records taken from the consumer per poll.
POLL_RECORDS = 2000
#: Held updates (of open times) at which the first memory warning is logged; again at every
#: doubling after it, as ``verify`` warns.
WARN_HELD = 1_000_000

log = logging.getLogger(__name__)


class TopicFollower:
    """A topic read from its beginning, handing out complete times as they are proven.

    Args:
        bootstrap_servers: The Kafka servers.
        topic: The topic.
        codec: The codec its messages are decoded with.
        config: librdkafka client settings (``security.protocol``, ...).
        broker_timeout: Seconds a broker may be unreachable before `BrokerError`.
        start: Times below this frontier are taken as handed out already: their updates are
            read (the reader needs them to prove later times) but not returned.
        warn_held: Held updates at which the first memory warning is logged.
        workers: Decode processes. None: one per core once the topic proves large; 0: none;
            N: N from the start.

    Raises:
        BrokerError: The topic does not exist or the broker cannot be reached.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        codec: CdcCodec,
        config: Mapping[str, Any] | None = None,
        *,
        broker_timeout: float = BROKER_TIMEOUT,
        start: int = 0,
        warn_held: int = WARN_HELD,
        workers: int | None = None,
    ) -> None:
        if workers is not None and workers < 0:
            raise ValueError(f"workers must be >= 0 or None, got {workers}")
        self.topic, self.codec, self.start = topic, codec, start
        self._next_warning = warn_held
        self.reader = CdcReader()
        self._scan = TopicScan(bootstrap_servers, topic, config, broker_timeout)
        self._ready: list[Update] = []  # proven, at or beyond `start`, not handed out yet
        self._headers: dict[tuple[int, int], list] = {}
        self._failed: ViolationError | None = None  # once broken, always: nothing more out
        #: the likely causes of undecodable messages, as ``verify`` says them
        self.hints: list[str] = []
        self._report_undecodable = UndecodableReport(self.reader, codec, self.hints)
        self._max_workers = default_workers() if workers is None else workers
        self._asked = workers or 0
        self._pool: DecodePool | None = None
        self._pool_size = 0
        self._chunk: list[tuple[int, int, bytes | None]] = []  # read, for the pool
        self._chunk_bytes = 0
        self._decoded_bytes = self._decoded_messages = 0  # decoded in this process
        #: True when the last `advance` stopped because the topic was quiet: a poll (of
        #: `IDLE_WAIT`, or what was left of ``max_seconds``) found nothing, every partition
        #: read up to where it ended when the follower started
        self.caught_up = False

    @property
    def read_all_at_start(self) -> bool:
        """True once every message the topic held when this follower started has been read."""
        return not self._scan.pending

    @property
    def workers(self) -> int:
        """The decode processes this follower runs (0 while it decodes in this process)."""
        return 0 if self._pool is None else self._pool_size

    @property
    def frontier(self) -> tuple[int, ...]:
        """``(t,)``: every time below ``t`` is proven; ``()``: the history is closed."""
        return self.reader.frontier

    def advance(self, max_seconds: float = 1.0, until: int | None = None) -> list[Update]:
        """Read what the topic holds now (for at most ``max_seconds``) and return the updates of
        the times it proved complete, in time order.

        Args:
            max_seconds: The most time spent reading; it stops sooner once the topic is quiet
                for `IDLE_WAIT` seconds (or for what is left of ``max_seconds``, if less).
            until: Stop reading once the frontier reaches this time (for a replay).

        Returns:
            The updates of the newly complete times (at or beyond ``start``), consolidated.

        Raises:
            ViolationError: The topic broke the protocol (and again on every call after: a
                broken history hands out nothing more).
            BrokerError: The broker is unreachable for longer than the broker timeout.
        """
        if self._failed is not None:
            raise self._failed
        deadline = time.monotonic() + max_seconds
        self.caught_up = False
        if self._pool is None and self._asked:  # asked for: no size estimate first
            self._start_pool(self._asked)
        while (left := deadline - time.monotonic()) > 0:
            if until is not None and _reached(self.frontier, until):
                break
            pool = self._pool
            busy = pool is not None and pool.in_flight > 0
            # never past the deadline: a time proven meanwhile is handed out on time
            wait = 0.0 if busy else min(IDLE_WAIT, left)
            records = self._scan.poll(wait, POLL_RECORDS, self._keep_headers)
            if not records and not self._scan.pending and not busy:
                self.caught_up = True  # quiet: the end of what the topic holds now
                break
            if pool is None:
                for partition, offset, value in records:
                    self._feed(partition, offset, value)
                self._maybe_start_pool(records)
            else:
                self._dispatch(pool, records)
            self._warn_if_held()
        self._drain()  # what was read is handed to the reader before this call returns
        self._raise_violations()
        out, self._ready = self._ready, []
        return out

    def close(self) -> None:
        """Close the consumer and stop the decode workers."""
        try:
            self._scan.close()
        finally:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> TopicFollower:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- inside ---------------------------------------------------------------------------

    def _keep_headers(self, partition: int, offset: int, headers: list) -> None:
        if not marks_updates(headers):
            self._headers[(partition, offset)] = headers

    def _feed(self, partition: int, offset: int, value: bytes | None) -> None:
        """Decode one message here and push it to the reader."""
        headers = self._headers.pop((partition, offset), None)
        self._decoded_messages += 1
        self._decoded_bytes += len(value or b"")
        try:
            message = self.codec.decode(value)
        except DecodeError as exc:
            self._undecodable(partition, offset, value, str(exc))
            return
        self._push(partition, offset, message, headers)

    def _push(self, partition: int, offset: int, message: Any, headers: Any) -> None:
        for finished, _frontier in self.reader.push(
            message, partition=partition, offset=offset, headers=headers
        ):
            start = self.start
            self._ready.extend(u for u in finished if u.time >= start)

    def _undecodable(self, partition: int, offset: int, value: bytes | None, error: str) -> None:
        self.reader.messages += 1
        self._report_undecodable(partition, offset, value, error)

    # -- decode workers -------------------------------------------------------------------

    def _maybe_start_pool(self, records: list) -> None:
        """Start the decode workers once the messages still to read at the topic's start,
        at the size of those decoded so far, make them worth their start-up."""
        if not self._max_workers or not records or not self._decoded_messages:
            return
        left = self._scan.messages_at_start - self._decoded_messages
        if left * self._decoded_bytes / self._decoded_messages >= PARALLEL_MIN_BYTES:
            self._start_pool(self._max_workers)

    def _start_pool(self, workers: int) -> None:
        self._pool, self._pool_size = DecodePool(self.codec, workers), workers

    def _dispatch(self, pool: DecodePool, records: list) -> None:
        """Hand full chunks of ``records`` to the workers and push what they decoded."""
        for record in records:
            self._chunk.append(record)
            self._chunk_bytes += len(record[2] or b"")
            if self._chunk_bytes >= CHUNK_BYTES:
                self._submit(pool)
        if self._chunk and len(records) < POLL_RECORDS:  # nothing more buffered: send it
            self._submit(pool)
        if pool.in_flight and (not records or pool.in_flight >= pool.max_in_flight):
            self._handle(pool.next_result())  # nothing to read, or the workers are behind
        while pool.ready():
            self._handle(pool.next_result())

    def _submit(self, pool: DecodePool) -> None:
        pool.submit(self._chunk)
        self._chunk, self._chunk_bytes = [], 0

    def _drain(self) -> None:
        """Push every chunk read so far, waiting for the workers."""
        pool = self._pool
        if pool is None:
            return
        if self._chunk:
            self._submit(pool)
        while pool.in_flight:
            self._handle(pool.next_result())

    def _handle(self, entries: list[Entry]) -> None:
        """Push a decoded chunk to the reader, in order."""
        feed_decoded(entries, self._headers, self._push, self._undecodable)

    def _warn_if_held(self) -> None:
        held = self.reader.held
        if held < self._next_warning:
            return
        self._next_warning = max(self._next_warning * 2, held + 1)
        log.warning(
            "topic %s: %s updates are held beyond frontier %s: no progress statement proves "
            "them complete yet, and memory grows with them until one does",
            self.topic,
            f"{held:,}",
            list(self.frontier),
        )

    def _raise_violations(self) -> None:
        if self.reader.violations:
            self._ready = []
            self._failed = ViolationError(self.topic, self.reader.violations, self.hints)
            raise self._failed


def replay(
    bootstrap_servers: str,
    topic: str,
    codec: CdcCodec,
    start: int,
    end: int,
    config: Mapping[str, Any] | None = None,
    *,
    broker_timeout: float = BROKER_TIMEOUT,
) -> list[Update]:
    """The updates of the times in ``[start, end)`` again, read afresh from the topic's
    beginning: what a consumer that restarts delivers once more.

    Raises:
        ViolationError: The topic broke the protocol on the way.
        BrokerError: The broker is unreachable for longer than ``broker_timeout``, or the topic
            no longer proves ``end`` within it (messages deleted by retention).
    """
    from cdc_emitter.errors import BrokerError

    out: list[Update] = []
    with TopicFollower(
        bootstrap_servers, topic, codec, config, broker_timeout=broker_timeout, start=start
    ) as follower:
        # give up after broker_timeout without progress (not in all: a long topic takes long)
        deadline = time.monotonic() + broker_timeout
        read = follower.reader.messages
        while not _reached(follower.frontier, end):
            out.extend(u for u in follower.advance(1.0, until=end) if u.time < end)
            if follower.reader.messages > read:
                read, deadline = follower.reader.messages, time.monotonic() + broker_timeout
            elif time.monotonic() > deadline and not _reached(follower.frontier, end):
                raise BrokerError(
                    f"topic {topic!r} on {bootstrap_servers} no longer proves the times below "
                    f"{end} (its frontier is {list(follower.frontier)}, and nothing more came in "
                    f"{broker_timeout:g}s): were messages deleted by retention?"
                )
        out.extend(u for u in follower.advance(0.0) if u.time < end)
    return out


def _reached(frontier: tuple[int, ...], time_: int) -> bool:
    return not frontier or frontier[0] >= time_


__all__ = ["TopicFollower", "Violation", "replay"]
