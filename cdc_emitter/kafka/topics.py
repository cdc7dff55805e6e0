"""Topics: making sure one exists, its settings, and the cluster's metadata about it.

Guarantees: a missing topic, an unreachable cluster and a refusing one each raise a
`BrokerError` (or `RefusedError`) that
names the topic and the bootstrap servers; an unreachable cluster is waited for at most
``timeout`` seconds, a refusing one not at all.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from cdc_emitter.errors import BrokerError, ConfigError
from cdc_emitter.kafka.config import (
    BROKER_TIMEOUT,
    check_bootstrap,
    client_config,
    make_client,
    refused_error,
)

__all__ = [
    "check_topic_name",
    "ensure_topic",
    "metadata",
    "missing_topic",
    "topic_partitions",
    "topic_settings",
]

log = logging.getLogger(__name__)

#: Kafka's own rule for a topic name (its ``Topic.validate``).
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME = 249


def check_topic_name(topic: str) -> str:
    """``topic`` if Kafka accepts it as a topic name, else a `ConfigError` naming the first
    character it refuses — before any client connects.

    Kafka takes 1 to 249 of ``a-z A-Z 0-9 . _ -``, and neither ``.`` nor ``..``.
    """
    if not isinstance(topic, str) or not topic:
        raise ConfigError("a topic name is required")
    shown = topic if len(topic) <= 80 else f"{topic[:60]}… ({len(topic)} characters)"
    if len(topic) > MAX_TOPIC_NAME:
        raise ConfigError(
            f"topic name {shown!r} is {len(topic)} characters long; Kafka takes at most "
            f"{MAX_TOPIC_NAME}"
        )
    if topic in (".", ".."):
        raise ConfigError(f"topic name {topic!r} is not allowed by Kafka")
    if not _TOPIC_NAME.fullmatch(topic):
        bad = next(c for c in topic if not _TOPIC_NAME.fullmatch(c))
        raise ConfigError(
            f"topic name {shown!r} has {bad!r}, which Kafka refuses: use letters, digits, "
            "'.', '_' and '-'"
        )
    return topic


def metadata(client: Any, bootstrap_servers: str, topic: str, timeout: float) -> Any:
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
            refused = refused_error(client, bootstrap_servers)
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


def topic_partitions(
    client: Any, bootstrap_servers: str, topic: str, timeout: float
) -> list[int] | None:
    """Partition ids of ``topic``, or None when it does not exist. Other errors raise BrokerError."""
    md = metadata(client, bootstrap_servers, topic, timeout)
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


def missing_topic(topic: str, bootstrap_servers: str, *, reading: bool = False) -> BrokerError:
    """The error for a topic that does not exist (to read from, or to write to)."""
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
    bootstrap_servers = check_bootstrap(bootstrap_servers)
    admin = make_client(AdminClient, client_config(bootstrap_servers, config))
    found = topic_partitions(admin, bootstrap_servers, topic, timeout)
    if found is not None:
        return len(found)
    if not create:
        raise missing_topic(topic, bootstrap_servers)
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
        md = metadata(admin, bootstrap_servers, topic, timeout)
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
    admin = make_client(AdminClient, client_config(check_bootstrap(bootstrap_servers), config))
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout + 5
        )
    except Exception as exc:  # noqa: BLE001 - authorization, old brokers: not ours to fail on
        log.debug("cannot describe topic %r on %s: %s", topic, bootstrap_servers, exc)
        return None
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}
