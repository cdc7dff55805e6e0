"""Kafka I/O: the only module that talks to Kafka (through confluent_kafka / librdkafka).

It moves bytes and nothing else: no Avro, no protocol, no Spark. What it guarantees:

* :func:`producer_config` gives an idempotent, ``acks=all`` producer configuration; the caller's
  overrides are applied to a copy and never mutated.
* :class:`CdcProducer` reports every failed delivery: :meth:`CdcProducer.flush` raises
  :class:`~cdc_emitter.errors.DeliveryError` (with the topic, partition and text of the FIRST
  error) if any message was not acknowledged, or if messages were still undelivered when the
  flush timed out. A flush that returns normally means every message produced so far is durable
  in Kafka (``acks=all``).
* :func:`read_topic` and :class:`TopicScan` read every partition from the beginning without
  touching consumer-group offsets; both know the end offsets they saw when they started.
* Errors name the topic, partition and bootstrap servers involved; configuration shown in any
  message goes through :func:`redact_config`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from cdc_emitter.errors import BrokerError, ConfigError, DeliveryError, RefusedError

__all__ = [
    "KafkaRecord",
    "CdcProducer",
    "producer_config",
    "consumer_config",
    "redact_config",
    "ensure_topic",
    "topic_settings",
    "read_topic",
    "TopicOffsets",
    "TopicScan",
    "end_offsets",
    "partition_end",
    "last_messages",
]

log = logging.getLogger(__name__)

#: The default of every reader's ``broker_timeout``: seconds it waits for a broker that does not
#: answer — for metadata and offsets, or with no progress while reading — before it gives up.
BROKER_TIMEOUT = 30.0

PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "enable.idempotence": True,  # no duplicates or reordering from producer retries
    "acks": "all",  # a delivery report means the message is on every in-sync replica
    "max.in.flight.requests.per.connection": 5,  # the maximum idempotence allows
    "compression.type": "lz4",
    "linger.ms": 20,
    "batch.size": 1_000_000,  # must not exceed message.max.bytes
    "message.max.bytes": 1_000_000,  # client-side request limit (librdkafka default)
    "allow.auto.create.topics": False,  # topics are created explicitly (ensure_topic)
    # a message not acknowledged within 2 minutes fails its delivery (librdkafka's default is
    # 5): a broker that is down fails the batch in bounded time, restarts are ridden out
    "message.timeout.ms": 120_000,
}

_SECRET_MARKERS = (
    "password",
    "secret",
    "sasl.oauthbearer",
    "sasl.jaas",
    "sasl.username",
    "token",
    "credential",
    "ssl.key.pem",
    "private",
    "basic.auth.user.info",
)
_REDACTED = "***"


class KafkaRecord(NamedTuple):
    """One consumed message. ``timestamp`` is in milliseconds since the epoch, or None."""

    partition: int
    offset: int
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int | None


#: Settings whose values are shown in messages; any other key's value is masked, so a misspelt
#: secret (``sasl.pasword``) is never echoed.
_PUBLIC_KEYS = frozenset(
    (
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "client.id",
        "acks",
        "enable.idempotence",
        "compression.type",
        "compression.codec",
        "partitioner",
        "allow.auto.create.topics",
        "enable.auto.commit",
        "auto.offset.reset",
        "group.id",
        "enable.partition.eof",
        "isolation.level",
        "ssl.endpoint.identification.algorithm",
        "api.version.request",
        "broker.address.family",
        "debug",
        "log_level",
    )
)
_PUBLIC_SUFFIXES = (".ms", ".bytes", ".kbytes", ".messages", ".retries", ".connection", ".count")


def _public(key: str) -> bool:
    lowered = key.lower()
    if any(marker in lowered for marker in _SECRET_MARKERS):
        return False
    return lowered in _PUBLIC_KEYS or lowered.endswith(_PUBLIC_SUFFIXES) or lowered == "retries"


def redact_text(text: str, cfg: Mapping[str, Any] | None) -> str:
    """``text`` with the value of every non-public setting of ``cfg`` masked wherever it appears."""
    for key, value in (cfg or {}).items():
        if isinstance(value, str) and len(value) >= 3 and not _public(str(key)):
            text = text.replace(value, _REDACTED)
    return text


def redact_config(cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of a client configuration with secret values masked, fit for logs and errors.

    Values are shown only for well-known public settings (servers, protocol and mechanism
    names, timeouts and sizes); every other value is masked, a secret's (a key containing
    password, secret, sasl.oauthbearer, sasl.jaas, sasl.username, token, credential,
    ssl.key.pem, private or basic.auth.user.info) and a misspelt key's alike.
    Callables (callbacks) are shown by name only.
    """
    out: dict[str, Any] = {}
    for key, value in (cfg or {}).items():
        if not callable(value) and not _public(str(key)):
            out[key] = _REDACTED
        elif callable(value):
            out[key] = f"<{getattr(value, '__name__', type(value).__name__)}>"
        else:
            out[key] = value
    return out


def _check_bootstrap(bootstrap_servers: str | None) -> str:
    if not bootstrap_servers or not str(bootstrap_servers).strip():
        raise ConfigError(
            "no Kafka bootstrap servers given: pass --bootstrap-servers HOST:PORT "
            "or set KAFKA_BOOTSTRAP_SERVERS"
        )
    return str(bootstrap_servers).strip()


def producer_config(
    bootstrap_servers: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A new producer configuration: :data:`PRODUCER_DEFAULTS`, the servers, then ``overrides``.

    ``overrides`` (librdkafka settings, e.g. from ``-X key=value``) win over the defaults; the
    mapping passed in is never modified.
    """
    cfg = dict(PRODUCER_DEFAULTS)
    cfg["bootstrap.servers"] = _check_bootstrap(bootstrap_servers)
    cfg.update(dict(overrides or {}))
    return cfg


def consumer_config(
    bootstrap_servers: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A reader configuration that commits nothing: throwaway group id, no auto commit, EOF events,
    short long-polls."""
    cfg: dict[str, Any] = {
        "bootstrap.servers": _check_bootstrap(bootstrap_servers),
        "group.id": f"cdc-emitter-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "allow.auto.create.topics": False,
        # One fetch is in flight per broker: a long poll on the partitions already read to their
        # end (default 500 ms) holds back the partitions still behind them, and on a flaky path
        # whose connections live less than that, it is cut every time and they never advance.
        "fetch.wait.max.ms": 100,
    }
    cfg.update(dict(overrides or {}))
    return cfg


def _client_config(bootstrap_servers: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    cfg = dict(overrides or {})
    cfg["bootstrap.servers"] = _check_bootstrap(bootstrap_servers)
    cfg.setdefault("allow.auto.create.topics", False)
    return cfg


class _FoldRepeats(logging.Filter):
    """Lets the first of a kind of librdkafka line through, then one summary per ``every``
    seconds: a broker that is down makes librdkafka say the same thing many times a second."""

    def __init__(self, every: float = 30.0) -> None:
        super().__init__()
        self.every = every
        self._seen: dict[
            str, list
        ] = {}  # kind -> [repeats held back, when one was last let through]

    def filter(self, record: logging.LogRecord) -> bool:
        import re

        kind = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        seen = self._seen.get(kind)
        if seen is None:
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[kind] = [0, now]
            return True
        if now - seen[1] < self.every:
            seen[0] += 1
            return False
        if seen[0]:
            record.msg = (
                f"{record.getMessage()} (and {seen[0]} more like it in {now - seen[1]:.0f}s)"
            )
            record.args = ()
        self._seen[kind] = [0, now]
        return True


#: librdkafka's own log lines go here instead of stderr (pass "logger" in a config to change it),
#: repeats folded into one line per kind and 30 seconds.
librdkafka_log = logging.getLogger(__name__ + ".librdkafka")
librdkafka_log.addFilter(_FoldRepeats())


#: Errors a client reported through its error callback, by ``id(client)`` (see :func:`_refused`).
_CLIENT_ERRORS: dict[int, list] = {}
#: Error codes that mean the broker answered and refused us: no point in waiting any longer.
_REFUSALS = {KafkaError._AUTHENTICATION: "authentication", KafkaError._SSL: "the TLS handshake"}


def _make(kind: type, cfg: dict[str, Any]) -> Any:
    cfg = dict(cfg)
    cfg.setdefault("logger", librdkafka_log)
    seen: list = []
    cfg.setdefault("error_cb", seen.append)
    try:
        client = kind(cfg)
        if len(_CLIENT_ERRORS) > 256:  # clients are short-lived; forget the oldest
            _CLIENT_ERRORS.pop(next(iter(_CLIENT_ERRORS)))
        _CLIENT_ERRORS[id(client)] = seen
        return client
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(
            f"invalid Kafka client configuration: {redact_text(str(exc), cfg)} "
            f"(configuration: {redact_config(cfg)})"
        ) from None  # the cause's text may hold a value


# --- producing ---------------------------------------------------------------------------------


class CdcProducer:
    """A producer for one topic that turns every failed delivery into a :class:`DeliveryError`.

    Use it as a context manager; leaving the block normally flushes (and raises if anything
    failed)::

        with CdcProducer("127.0.0.1:9092", "t") as producer:
            producer.produce(b"...")
        # here every message is acknowledged by Kafka (acks=all), or DeliveryError was raised

    Guarantees: ``produce`` never drops a message silently (a full local queue is drained by
    polling and the message is retried); the FIRST delivery error is kept with its topic,
    partition and text; once an error has been seen, further ``produce`` calls raise at once.
    """

    def __init__(
        self, bootstrap_servers: str, topic: str, config: Mapping[str, Any] | None = None
    ) -> None:
        self.topic = topic
        self.config = producer_config(bootstrap_servers, config)
        self.delivered = 0
        self.failed = 0
        #: ``{partition: offset}`` of the latest acknowledged message in each partition
        self.last_offsets: dict[int, int] = {}
        self.first_error: str | None = None
        self.refused = False  # the cluster refused us (credentials, certificate): do not wait
        self._pending_error: tuple[int | None, str] | None = None
        cfg = dict(self.config)
        cfg["error_cb"] = self._on_client_error
        self._producer = _make(Producer, cfg)
        log.debug("producer for topic %r: %s", topic, redact_config(self.config))

    # callbacks run inside poll()/flush() on the calling thread
    def _record_error(self, partition: int | None, text: str) -> None:
        self.failed += 1
        if self.first_error is None:
            where = (
                f"partition {partition}"
                if partition is not None and partition >= 0
                else "a partition"
            )
            self.first_error = f"delivery to topic {self.topic!r} {where} failed: {text}"

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.delivered += 1
            self.last_offsets[msg.partition()] = msg.offset()
        else:
            text = f"{err.str()} [{err.name()}]"
            if err.code() == KafkaError._MSG_TIMED_OUT:
                text += (
                    f": not acknowledged within message.timeout.ms="
                    f"{self.config.get('message.timeout.ms')} ms (is the broker down?)"
                )
            self._record_error(msg.partition() if msg is not None else None, text)

    def _on_client_error(self, err: KafkaError) -> None:
        # Transient errors (broker down, reconnecting) are retried by librdkafka; the
        # delivery timeout turns a lasting outage into delivery errors. Fatal ones count, and so
        # does a refusal (wrong credentials, untrusted certificate): waiting cannot mend it.
        what = _REFUSALS.get(err.code())
        if err.fatal():
            self._record_error(None, f"fatal producer error: {err.str()} [{err.name()}]")
        elif what is not None:
            self.refused = True
            self._record_error(
                None, f"{what} with Kafka at {self.config['bootstrap.servers']} failed: {err.str()}"
            )
        else:
            log.debug("kafka client error (retried): %s", err.str())

    def _raise_if_failed(self) -> None:
        if self.first_error is not None:
            more = f" ({self.failed} failed deliveries in all)" if self.failed > 1 else ""
            raise DeliveryError(self.first_error + more)

    def produce(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue one message (asynchronous; :meth:`flush` waits for the acknowledgements).

        Raises DeliveryError when an earlier delivery failed or Kafka refuses the message
        outright (e.g. larger than ``message.max.bytes``, unknown partition).
        """
        self._raise_if_failed()
        kwargs: dict[str, Any] = {"value": value, "on_delivery": self._on_delivery}
        if key is not None:
            kwargs["key"] = key
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(self.topic, **kwargs)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                self._producer.poll(0.05)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else exc
                text = f"{err.str()} [{err.name()}]" if isinstance(err, KafkaError) else str(err)
                self._record_error(partition, text)
                self._raise_if_failed()
        self._producer.poll(0)

    def poll(self, timeout: float = 0) -> None:
        """Serve delivery reports; raises DeliveryError if a delivery has failed."""
        self._producer.poll(timeout)
        self._raise_if_failed()

    def settle(self, timeout: float) -> None:
        """Give queued messages up to ``timeout`` seconds to land, raising nothing: for a task that
        fails anyway (its retry writes them again), so as few as possible are left in flight."""
        try:
            self._producer.flush(timeout)
        except Exception:  # noqa: BLE001 - the task's own error is the one to report
            log.debug("settling the producer of topic %r failed", self.topic, exc_info=True)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued message is acknowledged; raise DeliveryError otherwise.

        ``timeout=None`` waits as long as librdkafka's delivery timeout (``message.timeout.ms``)
        allows. Messages still undelivered when ``timeout`` expires are a failure too.
        """
        began = time.monotonic()
        while True:  # in slices, so a refusal (wrong password) fails now, not at the timeout
            left = None if timeout is None else timeout - (time.monotonic() - began)
            remaining = self._producer.flush(0.5 if left is None else max(0.0, min(0.5, left)))
            if self.refused:
                self._raise_if_failed()
            if remaining == 0 or (left is not None and left <= 0.5):
                break
        self._raise_if_failed()
        if remaining > 0:
            raise DeliveryError(
                f"{remaining} message(s) to topic {self.topic!r} were not delivered within "
                f"{timeout}s (bootstrap servers {self.config['bootstrap.servers']})"
            )

    def close(self) -> None:
        """Give queued messages a short chance, then let the client go."""
        try:
            self._producer.flush(1)
        except Exception:  # noqa: BLE001 - closing must not raise
            pass

    def __len__(self) -> int:
        """Messages queued and not yet acknowledged or failed."""
        return len(self._producer)

    def __enter__(self) -> CdcProducer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.flush()
        else:  # do not hide the original exception; give queued messages a short chance
            try:
                self._producer.flush(5)
            except Exception:  # noqa: BLE001
                pass


# --- topics ------------------------------------------------------------------------------------


def _refused(client: Any, bootstrap_servers: str) -> RefusedError | None:
    """A BrokerError when the client was refused (authentication, TLS), not merely unanswered."""
    for err in _CLIENT_ERRORS.get(id(client), ()):
        what = _REFUSALS.get(err.code())
        if what is None and "SSL handshake failed" in err.str():
            what = "the TLS handshake"
        if what is not None:
            return RefusedError(f"{what} with Kafka at {bootstrap_servers} failed: {err.str()}")
    return None


def _metadata(client: Any, bootstrap_servers: str, topic: str, timeout: float) -> Any:
    """The cluster's metadata for ``topic``; an unreachable cluster raises after ``timeout``
    seconds, a refusing one (wrong password, untrusted certificate) as soon as it refuses."""
    began = time.monotonic()
    while True:
        left = timeout - (time.monotonic() - began)
        try:
            return client.list_topics(topic=topic, timeout=max(0.05, min(0.5, left)))
        except KafkaException as exc:
            if hasattr(client, "poll"):
                client.poll(0)  # serve the error callback (an unassigned consumer reads nothing)
            refused = _refused(client, bootstrap_servers)
            if refused is not None:
                raise refused from None
            if left > 0.5:
                continue
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else exc
            raise BrokerError(
                f"cannot reach Kafka at {bootstrap_servers} (asking for topic {topic!r}, "
                f"waited {time.monotonic() - began:.0f}s): "
                f"{err.str() if isinstance(err, KafkaError) else err}"
            ) from exc


def _partitions(
    client: Any, bootstrap_servers: str, topic: str, timeout: float
) -> list[int] | None:
    """Partition ids of ``topic``, or None when it does not exist. Other errors raise BrokerError."""
    md = _metadata(client, bootstrap_servers, topic, timeout)
    tmd = md.topics.get(topic)
    if tmd is None:
        return None
    if tmd.error is not None:
        if tmd.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return None
        raise BrokerError(
            f"topic {topic!r} on broker {bootstrap_servers} is unusable: {tmd.error.str()}"
        )
    if not tmd.partitions:
        return None
    return sorted(tmd.partitions)


def _missing(topic: str, bootstrap_servers: str, *, reading: bool = False) -> BrokerError:
    if reading:
        return BrokerError(
            f"topic {topic!r} does not exist on broker {bootstrap_servers}: nothing to read "
            "(check the topic name and the bootstrap servers)"
        )
    return BrokerError(
        f"topic {topic!r} does not exist on broker {bootstrap_servers}; "
        "create it or pass create=True / --create-topic"
    )


def ensure_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    create: bool = False,
    partitions: int = 1,
    replication: int = 1,
    config: Mapping[str, Any] | None = None,
    topic_config: Mapping[str, str] | None = None,
    timeout: float = BROKER_TIMEOUT,
) -> int:
    """Make sure ``topic`` exists and return its number of partitions.

    A missing topic raises BrokerError naming the topic and the broker, unless ``create`` is
    true: then it is created with ``partitions``, ``replication`` and ``topic_config`` (topic
    settings such as ``max.message.bytes``) and this waits until its metadata is visible.
    An existing topic is left as it is. ``config`` holds client settings (security etc.).
    An unreachable cluster raises BrokerError naming the bootstrap servers.
    """
    bootstrap_servers = _check_bootstrap(bootstrap_servers)
    admin = _make(AdminClient, _client_config(bootstrap_servers, config))
    found = _partitions(admin, bootstrap_servers, topic, timeout)
    if found is not None:
        return len(found)
    if not create:
        raise _missing(topic, bootstrap_servers)
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication,
        config={k: str(v) for k, v in (topic_config or {}).items()},
    )
    future = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)[topic]
    try:
        future.result(timeout=timeout + 5)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            text = err.str() if isinstance(err, KafkaError) else str(exc)
            raise BrokerError(
                f"cannot create topic {topic!r} on broker {bootstrap_servers} "
                f"({partitions} partitions, replication {replication}): {text}"
            ) from exc
    deadline = time.monotonic() + timeout
    while True:  # creation is asynchronous: wait until every partition has a leader
        md = _metadata(admin, bootstrap_servers, topic, timeout)
        tmd = md.topics.get(topic)
        if (
            tmd is not None
            and tmd.error is None
            and tmd.partitions
            and all(p.leader >= 0 for p in tmd.partitions.values())
        ):
            return len(tmd.partitions)
        if time.monotonic() > deadline:
            raise BrokerError(
                f"topic {topic!r} was created on broker {bootstrap_servers} but did not become "
                f"available within {timeout:g}s"
            )
        time.sleep(0.1)


def topic_settings(
    bootstrap_servers: str,
    topic: str,
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float = BROKER_TIMEOUT,
) -> dict[str, str] | None:
    """The topic's effective configuration (``max.message.bytes``...), or None when the cluster
    does not say (no DescribeConfigs permission): a check that needs it is then skipped."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = _make(AdminClient, _client_config(_check_bootstrap(bootstrap_servers), config))
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout + 5
        )
    except Exception as exc:  # noqa: BLE001 - authorization, old brokers: not ours to fail on
        log.debug("cannot describe topic %r on %s: %s", topic, bootstrap_servers, exc)
        return None
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


# --- reading -----------------------------------------------------------------------------------

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
    bootstrap_servers = _check_bootstrap(bootstrap_servers)
    consumer = _make(Consumer, consumer_config(bootstrap_servers, config))
    try:
        parts = _partitions(consumer, bootstrap_servers, topic, timeout)
        if parts is None:
            if missing_ok:
                consumer.close()
                return None, []
            raise _missing(topic, bootstrap_servers, reading=True)
    except BaseException:
        consumer.close()
        raise
    return consumer, parts


class TopicScan:
    """Every partition of a topic read from its first offset, in batches of raw records.

    Partitions are *assigned* (no consumer group, nothing committed). ``ends`` holds the end
    offsets seen at the start, ``pending`` the partitions not yet read up to them; reading goes
    on past them for a caller that follows the topic. Use it as a context manager.

    Guarantees: a broker unreachable for more than ``broker_timeout`` seconds in a row, and
    any other consumer error, raise :class:`~cdc_emitter.errors.BrokerError` naming the topic,
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
            self._consumer.close()
            raise
        self.ends = {p: high for p, (_low, high) in marks.items()}
        self.next_offset = {p: low for p, (low, _high) in marks.items()}
        self.pending = {p for p, (low, high) in marks.items() if high > low}
        self.messages_at_start = sum(high - low for low, high in marks.values())
        self._down_since: float | None = None

    def poll(self, wait: float, max_records: int = 500) -> list[tuple[int, int, bytes | None]]:
        """Up to ``max_records`` ``(partition, offset, value)``: what is buffered, or else the next
        one within ``wait`` seconds (an empty list when none came)."""
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
        self._consumer.close()

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
        consumer.close()


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
        consumer.close()


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
    raises :class:`~cdc_emitter.errors.BrokerError` naming the topic and partition, and the
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

    def tail(
        self, n_per_partition: int = 10, timeout: float = 30.0
    ) -> tuple[list[KafkaRecord], dict[int, int]]:
        """The last (up to) ``n_per_partition`` messages of every partition, by (partition,
        offset), and every partition's end offset when they were read (see :func:`tail`)."""
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
            consumer.close()

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
    return tail(bootstrap_servers, topic, n_per_partition, config, timeout)[0]


def tail(
    bootstrap_servers: str,
    topic: str,
    n_per_partition: int = 10,
    config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> tuple[list[KafkaRecord], dict[int, int]]:
    """:func:`last_messages`, and every partition's end offset when they were read (a broker that
    does not answer is waited for at most ``timeout`` seconds)."""
    with TopicOffsets(bootstrap_servers, topic, config, broker_timeout=timeout) as offsets:
        return offsets.tail(n_per_partition, timeout)
