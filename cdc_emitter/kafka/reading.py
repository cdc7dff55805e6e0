"""Reading a topic: every partition from its first offset, its end offsets, and its last messages.

Guarantees:

* `read_topic` and `TopicScan` read every partition from the beginning without
  touching consumer-group offsets; both know the end offsets they saw when they started.
* Every reader here reads with ``isolation.level=read_committed`` (`consumer_config`): a message
  of an aborted transaction (a fenced writer's claim) is never returned, and the end offsets are
  the last stable ones, so reading stops before a transaction still open.
* A broker unreachable for more than ``broker_timeout`` seconds in a row, and any other consumer
  error, raise `BrokerError` naming the topic, the partition and the
  bootstrap servers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from cdc_emitter.errors import BrokerError
from cdc_emitter.kafka.config import BROKER_TIMEOUT, check_bootstrap, consumer_config, make_client
from cdc_emitter.kafka.topics import missing_topic, topic_partitions

__all__ = [
    "KafkaRecord",
    "TopicOffsets",
    "TopicScan",
    "end_offsets",
    "last_messages",
    "partition_end",
    "partition_tails",
    "read_topic",
]


class KafkaRecord(NamedTuple):
    """One consumed message. ``timestamp`` is in milliseconds since the epoch, or None."""

    partition: int
    offset: int
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int | None


# A partition without a leader for a moment (a broker restarting, a leader moving): worth asking again.
_LEADERLESS = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
}


def _watermarks(
    consumer: Any, bootstrap_servers: str, topic: str, parts: list[int], timeout: float
) -> dict[int, tuple[int, int]]:
    """Each partition's (low, high) offsets. A partition between leaders (just after a broker
    restart or a leader move) is asked again until ``timeout`` has passed, as a producer would
    retry it: the answer is only an error once the cluster has had that long to elect one."""
    out = {}
    deadline = time.monotonic() + timeout
    for p in parts:
        while True:
            try:
                out[p] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p),
                    timeout=max(deadline - time.monotonic(), 1.0),
                    cached=False,
                )
                break
            except KafkaException as exc:
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                leaderless = err is not None and (err.code() in _LEADERLESS or err.retriable())
                if not leaderless or time.monotonic() >= deadline:
                    raise BrokerError(
                        f"cannot read the offsets of topic {topic!r} partition {p} on {bootstrap_servers}: {exc}"
                    ) from exc
                time.sleep(0.2)
        if out[p] is None:
            raise BrokerError(
                f"no offsets for topic {topic!r} partition {p} on {bootstrap_servers}"
            )
    return out


_TRANSIENT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}


def _check_down(down_since: float, broker_timeout: float, doing: str, err: KafkaError) -> None:
    """Raise BrokerError once the broker has been unreachable for more than ``broker_timeout``
    seconds in a row (since ``down_since``), saying how long it was."""
    down = time.monotonic() - down_since
    if down > broker_timeout:
        raise BrokerError(
            f"{doing}: broker unreachable for {down:.0f}s "
            f"(broker_timeout={broker_timeout:g}s): {err.str()}"
        )


def _consume(
    consumer: Any,
    topic: str,
    starts: dict[int, int],
    ends: dict[int, int] | None,
    timeout: float | None,
    poll_timeout: float,
    broker_timeout: float = BROKER_TIMEOUT,
) -> Iterator[KafkaRecord]:
    """Yield records from ``starts``; with ``ends``, only offsets below them, stopping when all reached."""
    consumer.assign([TopicPartition(topic, p, off) for p, off in starts.items()])
    pending = set() if ends is None else {p for p, end in ends.items() if end > starts[p]}
    deadline = None if timeout is None else time.monotonic() + timeout
    down_since: float | None = None
    while ends is None or pending:
        wait = poll_timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                if ends is None:
                    return
                raise BrokerError(
                    f"reading topic {topic!r}: partitions {sorted(pending)} did not reach their end "
                    f"offsets {[ends[p] for p in sorted(pending)]} within {timeout:g}s"
                )
            wait = min(wait, left)
        # Drain what is buffered without waiting; when nothing is, block for the next message
        # or event only (a 1000-message batch with a timeout would wait out the timeout at the
        # end of every topic).
        batch = consumer.consume(num_messages=1000, timeout=0) or consumer.consume(1, timeout=wait)
        for msg in batch:
            err = msg.error()
            p = msg.partition()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if ends is not None and msg.offset() >= ends.get(p, 0):
                        pending.discard(p)
                    continue
                if err.code() in _TRANSIENT and not err.fatal():
                    down_since = down_since or time.monotonic()
                    _check_down(down_since, broker_timeout, f"reading topic {topic!r}", err)
                    continue
                where = f"partition {p}" if p is not None and p >= 0 else "(no partition)"
                raise BrokerError(
                    f"error reading topic {topic!r} {where}: {err.str()} [{err.name()}]"
                )
            down_since = None
            off = msg.offset()
            if ends is not None:
                if off >= ends[p]:
                    pending.discard(p)
                    continue  # beyond the snapshot taken at start
                if off >= ends[p] - 1:
                    pending.discard(p)
            ts_type, ts = msg.timestamp()
            yield KafkaRecord(
                p, off, msg.value(), list(msg.headers() or []), ts if ts_type else None
            )


log = logging.getLogger(__name__)


def close_reader(consumer: Any, timeout: float = BROKER_TIMEOUT) -> None:
    """Close a reading consumer (partitions assigned, nothing committed), waiting at most
    ``timeout`` seconds.

    librdkafka's close can wait without end while the connections to a broker keep breaking
    (confluentinc/librdkafka#4519; seen here under a proxy that cut every connection every
    0.3 s). A reader that commits nothing loses nothing by not waiting: the close goes on in a
    background thread, and the caller gets its answer.
    """

    def close() -> None:
        try:
            consumer.close()
        except Exception as exc:  # noqa: BLE001 - nothing is left to do with it but say so
            log.warning("closing a Kafka consumer failed: %s", exc)

    closing = threading.Thread(target=close, name="cdc-emitter-close", daemon=True)
    try:
        closing.start()
    except RuntimeError:  # the interpreter is shutting down: no new threads
        close()
        return
    closing.join(timeout)
    if closing.is_alive():
        log.warning(
            "a Kafka consumer did not close within %g s (broker connections breaking?); "
            "left to close in the background",
            timeout,
        )


def _open_reader(
    bootstrap_servers: str,
    topic: str,
    config: Mapping[str, Any] | None,
    timeout: float = BROKER_TIMEOUT,
    *,
    missing_ok: bool = False,
) -> tuple[Any, list[int]]:
    """A consumer for ``topic`` and the topic's partition ids. A missing topic raises
    BrokerError, or with ``missing_ok`` gives ``(None, [])``."""
    bootstrap_servers = check_bootstrap(bootstrap_servers)
    consumer = make_client(Consumer, consumer_config(bootstrap_servers, config))
    try:
        parts = topic_partitions(consumer, bootstrap_servers, topic, timeout)
        if parts is None:
            if missing_ok:
                close_reader(consumer, timeout)
                return None, []
            raise missing_topic(topic, bootstrap_servers, reading=True)
    except BaseException:
        close_reader(consumer, timeout)
        raise
    return consumer, parts


class TopicScan:
    """Every partition of a topic read from its first offset, in batches of raw records.

    Partitions are *assigned* (no consumer group, nothing committed). ``ends`` holds the end
    offsets seen at the start, ``pending`` the partitions not yet read up to them; reading goes
    on past them for a caller that follows the topic. Use it as a context manager.

    Guarantees: a broker unreachable for more than ``broker_timeout`` seconds in a row, and
    any other consumer error, raise `BrokerError` naming the topic,
    the partition and the servers; a missing topic raises it at construction.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        config: Mapping[str, Any] | None = None,
        broker_timeout: float = BROKER_TIMEOUT,
    ):
        self.topic, self.servers, self.broker_timeout = topic, bootstrap_servers, broker_timeout
        self._consumer, self.partitions = _open_reader(
            bootstrap_servers, topic, config, broker_timeout
        )
        try:
            marks = _watermarks(
                self._consumer, bootstrap_servers, topic, self.partitions, broker_timeout
            )
            self._consumer.assign(
                [TopicPartition(topic, p, OFFSET_BEGINNING) for p in self.partitions]
            )
        except BaseException:
            close_reader(self._consumer, broker_timeout)
            raise
        self.ends = {p: high for p, (_low, high) in marks.items()}
        self.next_offset = {p: low for p, (low, _high) in marks.items()}
        self.pending = {p for p, (low, high) in marks.items() if high > low}
        self.messages_at_start = sum(high - low for low, high in marks.values())
        self._down_since: float | None = None

    def poll(
        self,
        wait: float,
        max_records: int = 500,
        headers: Callable[[int, int, list[tuple[str, bytes | None]]], None] | None = None,
    ) -> list[tuple[int, int, bytes | None]]:
        """Up to ``max_records`` ``(partition, offset, value)``: what is buffered, or else the next
        one within ``wait`` seconds (an empty list when none came). ``headers``, when given, is
        called with ``(partition, offset, headers)`` for each of them that has headers."""
        consumer = self._consumer
        batch = consumer.consume(num_messages=max_records, timeout=0) or consumer.consume(1, wait)
        out = []
        pending, ends, next_offset = self.pending, self.ends, self.next_offset
        for msg in batch:
            err = msg.error()
            p = msg.partition()
            if err is not None:
                code = err.code()
                if code == KafkaError._PARTITION_EOF:
                    if msg.offset() >= ends.get(p, 0):
                        pending.discard(p)
                    continue
                if code in _TRANSIENT and not err.fatal():
                    self._down_since = self._down_since or time.monotonic()
                    _check_down(
                        self._down_since,
                        self.broker_timeout,
                        f"reading topic {self.topic!r} on {self.servers}",
                        err,
                    )
                    continue
                where = f"partition {p}" if p is not None and p >= 0 else "(no partition)"
                raise BrokerError(
                    f"error reading topic {self.topic!r} {where} on {self.servers}: "
                    f"{err.str()} [{err.name()}]"
                )
            off = msg.offset()
            next_offset[p] = off + 1
            if p in pending and off >= ends[p] - 1:
                pending.discard(p)
            out.append((p, off, msg.value()))
            if headers is not None:
                found = msg.headers()
                if found:
                    headers(p, off, found)
        if out:
            self._down_since = None
        return out

    def lag(self) -> int:
        """Messages known to be in the topic and not read yet."""
        lag = 0
        for p in self.partitions:
            try:
                _low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=0.1, cached=True
                )
            except KafkaException:
                high = -1
            lag += max(0, max(high, self.ends.get(p, 0)) - self.next_offset[p])
        return lag

    def close(self) -> None:
        """Close the consumer, waiting at most ``broker_timeout`` seconds (`close_reader`);
        again, nothing."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            close_reader(consumer, self.broker_timeout)

    def __enter__(self) -> TopicScan:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    stop_at_end: bool = True,
    poll_timeout: float = 1.0,
    broker_timeout: float = BROKER_TIMEOUT,
) -> Iterator[KafkaRecord]:
    """Yield every message of every partition of ``topic`` from the beginning.

    Nothing is committed (throwaway group id, no auto commit), so reading has no side effect.
    Order: per partition in offset order; partitions interleave arbitrarily.

    ``stop_at_end=True``: the end offsets (high watermarks) are taken once at the start; the
    generator stops when every partition has reached its end, and messages written later are
    not yielded. If ``timeout`` seconds pass first, BrokerError is raised (never a silent stall).
    ``stop_at_end=False``: follows new messages until the caller stops iterating or ``timeout``
    seconds pass (then the generator simply ends).
    A missing topic or a consumer error raises BrokerError naming the topic (and partition); so
    does a broker that does not answer for ``broker_timeout`` seconds.
    """
    consumer, parts = _open_reader(bootstrap_servers, topic, config, broker_timeout)
    try:
        ends = None
        starts = {p: OFFSET_BEGINNING for p in parts}
        if stop_at_end:
            marks = _watermarks(consumer, bootstrap_servers, topic, parts, broker_timeout)
            ends = {p: high for p, (_low, high) in marks.items()}
            starts = {p: low for p, (low, _high) in marks.items()}
        yield from _consume(consumer, topic, starts, ends, timeout, poll_timeout, broker_timeout)
    finally:
        close_reader(consumer, broker_timeout)


def end_offsets(
    bootstrap_servers: str,
    topic: str,
    config: Mapping[str, Any] | None = None,
    timeout: float = BROKER_TIMEOUT,
) -> dict[int, tuple[int, int]]:
    """``{partition: (low, high)}`` watermarks of ``topic``: offsets ``low <= o < high`` exist.
    ``timeout``: seconds to wait for a broker that does not answer before raising."""
    consumer, parts = _open_reader(bootstrap_servers, topic, config, timeout)
    try:
        return _watermarks(consumer, bootstrap_servers, topic, parts, timeout)
    finally:
        close_reader(consumer, timeout)


def partition_end(
    bootstrap_servers: str, topic: str, partition: int = 0, config: Mapping[str, Any] | None = None
) -> int:
    """The high watermark of one partition: the offset its next message will get."""
    with TopicOffsets(bootstrap_servers, topic, config) as offsets:
        return offsets.end(partition)


class TopicOffsets:
    """One consumer kept open to ask a topic's end offsets and read its tail, again and again.

    A new client per question pays a connection, a metadata request and (with security) a
    handshake — tens of milliseconds each time; a sink asks before and after every batch. The
    client reconnects by itself after a broker restart. Nothing is committed (no group).

    Guarantees: every answer is asked of the broker when called (no cached offsets); an error
    raises `BrokerError` naming the topic and partition, and the
    client is then replaced on the next call.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        config: Mapping[str, Any] | None = None,
        broker_timeout: float = BROKER_TIMEOUT,
    ):
        self.topic, self.servers, self._config = topic, bootstrap_servers, config
        self.broker_timeout = broker_timeout
        self._consumer: Any = None
        self.partitions: list[int] = []

    def _open(self, *, missing_ok: bool = False) -> Any:
        if self._consumer is None:
            # a short long-poll: a fetch left in flight by the last read delays the next one
            # by up to fetch.wait.max.ms (librdkafka sends one fetch at a time per broker)
            config = {**(self._config or {}), "fetch.wait.max.ms": 10}
            self._consumer, self.partitions = _open_reader(
                self.servers, self.topic, config, self.broker_timeout, missing_ok=missing_ok
            )
        return self._consumer

    def partition_count(self) -> int | None:
        """The topic's number of partitions, or None when it does not exist; asked through the
        kept client, so that the questions after it reuse its connection (a new client's first
        metadata request waits ~50 ms for one). A client that fails to open is closed there."""
        return None if self._open(missing_ok=True) is None else len(self.partitions)

    def end(self, partition: int = 0) -> int:
        """The high watermark of ``partition``: the offset its next message will get."""
        try:
            return _watermarks(
                self._open(), self.servers, self.topic, [partition], self.broker_timeout
            )[partition][1]
        except BaseException:
            self.close()
            raise

    def partition_tails(
        self, n_per_partition: int = 10, timeout: float = 30.0
    ) -> tuple[list[KafkaRecord], dict[int, int]]:
        """The last (up to) ``n_per_partition`` messages of every partition, by (partition,
        offset), and every partition's end offset when they were read (see
        `partition_tails`)."""
        try:
            consumer = self._open()
            marks = _watermarks(
                consumer, self.servers, self.topic, self.partitions, self.broker_timeout
            )
            ends = {p: high for p, (_low, high) in marks.items()}
            live = {p: (low, high) for p, (low, high) in marks.items() if high > low}
            if not live or n_per_partition <= 0:
                return [], ends
            starts = {p: max(low, high - n_per_partition) for p, (low, high) in live.items()}
            records = list(
                _consume(
                    consumer,
                    self.topic,
                    starts,
                    {p: ends[p] for p in live},
                    timeout,
                    0.5,
                    self.broker_timeout,
                )
            )
            consumer.unassign()  # no fetching in the background until the next question
        except BaseException:
            self.close()
            raise
        return sorted(records, key=lambda r: (r.partition, r.offset)), ends

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            close_reader(consumer, self.broker_timeout)

    def __enter__(self) -> TopicOffsets:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def last_messages(
    bootstrap_servers: str,
    topic: str,
    n_per_partition: int = 10,
    config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> list[KafkaRecord]:
    """The last (up to) ``n_per_partition`` messages of every partition, by (partition, offset).

    Reads only the tail (from ``high - n``), so it is cheap on long topics. Offsets missing in
    that window (compaction, transaction markers) simply yield fewer records.
    """
    return partition_tails(bootstrap_servers, topic, n_per_partition, config, timeout)[0]


def partition_tails(
    bootstrap_servers: str,
    topic: str,
    n_per_partition: int = 10,
    config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> tuple[list[KafkaRecord], dict[int, int]]:
    """`last_messages`, and every partition's end offset when they were read (a broker that
    does not answer is waited for at most ``timeout`` seconds)."""
    with TopicOffsets(bootstrap_servers, topic, config, broker_timeout=timeout) as offsets:
        return offsets.partition_tails(n_per_partition, timeout)
