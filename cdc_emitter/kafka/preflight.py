"""Checks a command runs before its real work: are the settings valid, does the cluster answer
and accept us, does the topic exist — answered in seconds, in one line.

A sink or a reader rides out a broker that restarts (it waits up to its ``broker_timeout``);
a command that has not started yet should not: a typo in ``--bootstrap-servers`` is far likelier
than a restart at that moment, and the user is waiting. Hence `check_cluster` gives up early
when librdkafka says why it cannot connect (connection refused, unknown host) and after
`PREFLIGHT_TIMEOUT` seconds when nothing answers at all.

Guarantees: every failure is a `CdcError` of one line that names the servers (and the topic),
the cause and what to change; no setting's value that could be a secret appears in it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from cdc_emitter.errors import BrokerError
from cdc_emitter.kafka.config import (
    check_bootstrap,
    client_config,
    make_client,
    refused_error,
    reported_errors,
)
from cdc_emitter.kafka.topics import check_topic_name, missing_topic

__all__ = ["PREFLIGHT_TIMEOUT", "check_cluster"]

#: Seconds a command waits at most, before its real work, for a cluster that does not answer.
PREFLIGHT_TIMEOUT = 10.0
#: Seconds it goes on trying after librdkafka has said why it cannot connect (a broker that
#: is just starting refuses connections for a moment).
_GRACE = 1.0

_RESOLVE = re.compile(r"Failed to resolve '([^']*)'")
_LOG_PREFIX = re.compile(r"^\S+/bootstrap: |^\S+: ")
#: The preflight client's own log lines: its errors are summed up in the one we raise.
_QUIET = logging.getLogger("cdc_emitter.kafka.preflight.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def check_cluster(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None = None,
    *,
    topic: str | None = None,
    require_topic: bool = False,
    reading: bool = False,
    timeout: float = PREFLIGHT_TIMEOUT,
) -> int | None:
    """Ask the cluster for ``topic``'s metadata once, failing fast and plainly.

    Args:
        bootstrap_servers: The servers to ask.
        config: librdkafka client settings (security etc.); an unknown key or a bad value fails
            here, before anything connects.
        topic: The topic the command works on; its name is checked before any connection.
        require_topic: A missing ``topic`` fails (when the command will not create it).
        reading: The command reads ``topic`` (the message for a missing one says so).
        timeout: Seconds to wait at most for a cluster that does not answer.

    Returns:
        The topic's number of partitions, or None when it does not exist (or no topic given).

    Raises:
        ConfigError: A setting librdkafka refuses, or a topic name Kafka refuses.
        RefusedError: The cluster answered and refused us (authentication, TLS).
        BrokerError: No answer (connection refused, unknown host, silence), or a missing topic
            with ``require_topic``.
    """
    servers = check_bootstrap(bootstrap_servers)
    if topic is not None:
        check_topic_name(topic)
    cfg = client_config(servers, config)
    # librdkafka connects to each bootstrap server in turn; a short back-off tries them sooner
    cfg.setdefault("reconnect.backoff.ms", 50)
    cfg.setdefault("logger", _QUIET)
    admin = make_client(AdminClient, cfg)
    began = time.monotonic()
    first_cause: float | None = None
    while True:
        try:
            md = admin.list_topics(topic=topic, timeout=0.5)
            break
        except KafkaException:
            admin.poll(0)  # serve the error callback
        refused = refused_error(admin, servers)
        if refused is not None:
            raise refused
        now = time.monotonic()
        errors = reported_errors(admin)
        cause = _unreachable_cause(errors)
        # with several servers, one that refuses says nothing of the others: wait until
        # librdkafka says that all are down
        decided = len(servers.split(",")) == 1 or any(
            e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors
        )
        if cause is not None and decided and first_cause is None:
            first_cause = now
        waited = now - began
        if (first_cause is not None and now - first_cause >= _GRACE) or waited >= timeout:
            reason, hint = cause or (
                f"no answer in {waited:.0f}s",
                "check --bootstrap-servers, the network and -X security.protocol",
            )
            raise BrokerError(f"cannot reach Kafka at {servers}: {reason}; {hint}")
    if topic is None:
        return None
    tmd = md.topics.get(topic)
    missing = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
    if tmd is not None and tmd.error is not None and tmd.error.code() not in missing:
        # e.g. TOPIC_AUTHORIZATION_FAILED: the topic may well exist; say what the broker said
        raise BrokerError(f"topic {topic!r} on broker {servers} is unusable: {tmd.error.str()}")
    if tmd is None or tmd.error is not None or not tmd.partitions:
        if require_topic:
            raise missing_topic(topic, servers, reading=reading)
        return None
    return len(tmd.partitions)


def _unreachable_cause(errors: list) -> tuple[str, str] | None:
    """Why librdkafka cannot connect, in a few words, and what to check, from the errors it
    reported; None when it has not said (the servers may just be slow)."""
    for err in reversed(errors):
        text = err.str()
        resolve = _RESOLVE.search(text)
        if resolve is not None:
            host = resolve.group(1).rsplit(":", 1)[0]
            return f"host {host!r} does not resolve", "check --bootstrap-servers"
        if "Connection refused" in text:
            return "connection refused", "is a broker listening there? check --bootstrap-servers"
        if "Invalid response size" in text:
            return (
                "what answers is not a Kafka broker (or it expects TLS)",
                "check --bootstrap-servers and -X security.protocol",
            )
    down = [e for e in errors if e.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)]
    if down:
        detail = _LOG_PREFIX.sub("", down[-1].str()).strip()
        return detail[:120], "check --bootstrap-servers and -X security.protocol"
    return None
