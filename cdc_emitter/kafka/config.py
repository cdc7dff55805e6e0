"""Kafka client configuration: the defaults, producer and reader settings, redaction of secrets,
and making a client whose log lines and errors we keep.

Guarantees:

* `producer_config` gives an idempotent, ``acks=all`` producer configuration; the caller's
  overrides are applied to a copy and never mutated.
* `consumer_config` reads with ``isolation.level=read_committed`` (`READ_ISOLATION`): a progress
  statement written in a transaction that aborted is never seen. A caller's
  ``read_uncommitted`` is kept, with a warning (`reader_isolation`).
* Configuration shown in any message goes through `redact_config` (or
  `redact_text`): only well-known public settings are shown.
* A client made by `make_client` logs through `librdkafka_log`, repeats folded, and
  remembers the errors it reported, so `refused_error` can tell a refusal from silence.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from cdc_emitter.errors import ConfigError, RefusedError

__all__ = [
    "BROKER_TIMEOUT",
    "ISOLATION_LEVELS",
    "PRODUCER_DEFAULTS",
    "READ_ISOLATION",
    "REFUSALS",
    "check_bootstrap",
    "client_config",
    "consumer_config",
    "librdkafka_log",
    "make_client",
    "producer_config",
    "reader_isolation",
    "redact_config",
    "redact_text",
    "refused_error",
    "reported_errors",
    "setting_error_text",
]

log = logging.getLogger(__name__)

#: The default of every reader's ``broker_timeout``: seconds it waits for a broker that does not
#: answer — for metadata and offsets, or with no progress while reading — before it gives up.
BROKER_TIMEOUT = 30.0

#: How every reader of a topic reads. A sink writes each batch's progress statement as a claim
#: in a short Kafka transaction; a writer fenced by another aborts it, and the aborted claim stays
#: in the log. A ``read_committed`` reader never sees it (nor a claim whose transaction is still
#: open: it reads up to the last stable offset); a ``read_uncommitted`` one would take it as true.
READ_ISOLATION = "read_committed"
#: The values of ``isolation.level`` (librdkafka's and the Java client's alike).
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_WARNED_ISOLATION: set[str] = set()  # levels warned about in this process

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


def check_bootstrap(bootstrap_servers: str | None) -> str:
    """The bootstrap servers, stripped; none given raises `ConfigError`."""
    if not bootstrap_servers or not str(bootstrap_servers).strip():
        raise ConfigError(
            "no Kafka bootstrap servers given: pass --bootstrap-servers HOST:PORT "
            "or set KAFKA_BOOTSTRAP_SERVERS"
        )
    return str(bootstrap_servers).strip()


def producer_config(
    bootstrap_servers: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A new producer configuration: `PRODUCER_DEFAULTS`, the servers, then ``overrides``.

    ``overrides`` (librdkafka settings, e.g. from ``-X key=value``) win over the defaults; the
    mapping passed in is never modified.
    """
    cfg = dict(PRODUCER_DEFAULTS)
    cfg["bootstrap.servers"] = check_bootstrap(bootstrap_servers)
    cfg.update(dict(overrides or {}))
    return cfg


def reader_isolation(config: Mapping[str, Any] | None) -> str:
    """The ``isolation.level`` a reader of ``config`` reads with: `READ_ISOLATION` unless
    ``config`` says ``read_uncommitted``, which is kept (a user looking at what aborted) and
    warned about once per process: uncommitted claims may then be seen.

    Raises:
        ConfigError: ``isolation.level`` is neither of `ISOLATION_LEVELS`.
    """
    value = (config or {}).get("isolation.level")
    if value is None:
        return READ_ISOLATION
    level = str(value).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise ConfigError(
            f"isolation.level={value!r}: readers take read_committed (the default) or "
            "read_uncommitted"
        )
    if level != READ_ISOLATION and level not in _WARNED_ISOLATION:
        _WARNED_ISOLATION.add(level)
        log.warning(
            "isolation.level=%s: this reader also sees messages of aborted and still-open Kafka "
            "transactions, so a progress statement (a sink's claim) that was never committed may "
            "be read as if it were; readers of a CDC topic need read_committed",
            level,
        )
    return level


def consumer_config(
    bootstrap_servers: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A reader configuration that commits nothing: throwaway group id, no auto commit, EOF events,
    short long-polls, and ``isolation.level=read_committed`` (see `reader_isolation`)."""
    cfg: dict[str, Any] = {
        "bootstrap.servers": check_bootstrap(bootstrap_servers),
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
    # librdkafka's default too, said here so that no override of another default drops it
    cfg["isolation.level"] = reader_isolation(overrides)
    return cfg


def client_config(bootstrap_servers: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """An admin client's configuration: ``overrides`` with the servers, no topic auto-creation."""
    cfg = dict(overrides or {})
    cfg["bootstrap.servers"] = check_bootstrap(bootstrap_servers)
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
librdkafka_log = logging.getLogger("cdc_emitter.kafka.librdkafka")
librdkafka_log.addFilter(_FoldRepeats())


#: Errors a client reported through its error callback, by ``id(client)`` (see
#: `refused_error`).
_CLIENT_ERRORS: dict[int, list] = {}
#: Error codes that mean the broker answered and refused us: no point in waiting any longer.
REFUSALS = {KafkaError._AUTHENTICATION: "authentication", KafkaError._SSL: "the TLS handshake"}


def make_client(kind: type, cfg: dict[str, Any]) -> Any:
    """A ``kind`` client (``Producer``, ``Consumer``, ``AdminClient``) made from ``cfg``.

    Raises:
        ConfigError: librdkafka refuses the configuration (shown redacted).
    """
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
        raise ConfigError(setting_error_text(exc, cfg)) from None  # the cause may hold a value


#: librdkafka's names for the settings it also takes under another name (errors use these).
_ALIASES = {
    "acks": "request.required.acks",
    "linger.ms": "queue.buffering.max.ms",
    "retries": "message.send.max.retries",
    "compression.type": "compression.codec",
    "sasl.mechanism": "sasl.mechanisms",
}

#: Where librdkafka's settings are listed, for a key it does not know.
SETTINGS_URL = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"


def setting_error_text(exc: BaseException, cfg: Mapping[str, Any]) -> str:
    """One line for a configuration librdkafka refuses: its reason (which names the key), what
    to change, and never a value that could be a secret nor the rest of the configuration."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    reason = redact_text(err.str() if err is not None else str(exc), cfg).strip()
    reason = reason.removeprefix("Failed to create admin client: ")
    match = re.search(r'configuration property:? "([^"]+)"', reason)
    if match is None:
        return f"invalid Kafka client configuration: {reason}"
    key = match.group(1)
    if reason.startswith("No such"):
        return f"unknown Kafka setting -X {key}: librdkafka has no such key (check its spelling: {SETTINGS_URL})"
    given = key if key in cfg else next((k for k in cfg if _ALIASES.get(k) == key), key)
    shown = f"={cfg[given]!r}" if given in cfg and _public(str(given)) else ""
    return f"invalid value for Kafka setting -X {given}{shown}: {reason}"


def reported_errors(client: Any) -> list:
    """The errors (``KafkaError``) ``client`` has reported through its error callback so far
    (served by its ``poll``), oldest first."""
    return list(_CLIENT_ERRORS.get(id(client), ()))


def refused_error(client: Any, bootstrap_servers: str) -> RefusedError | None:
    """A RefusedError when the client was refused (authentication, TLS), not merely unanswered."""
    for err in _CLIENT_ERRORS.get(id(client), ()):
        what = REFUSALS.get(err.code())
        if what is None and "SSL handshake failed" in err.str():
            what = "the TLS handshake"
        if what is not None:
            return RefusedError(f"{what} with Kafka at {bootstrap_servers} failed: {err.str()}")
    return None
