"""Spark's Kafka source and writer as the sink, the reader and the converter use them: the
librdkafka-style settings users give, as the Java client's options; the write of update messages;
the Kafka client's error behind a failed Spark job.

Guarantees: a setting without a Java equivalent is refused with an error that names it and
what to do instead (never dropped silently); the writer always uses ``acks=all``; the reader
reads with ``kafka.isolation.level=read_committed`` (the Java client's default is
``read_uncommitted``), so no aborted claim is read; a SASL password stays out of what Spark and
Py4J print.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import functions as F

from cdc_emitter.errors import ConfigError
from cdc_emitter.kafka.config import reader_isolation

__all__ = [
    "java_client_options",
    "kafka_cause",
    "kafka_read_options",
    "kafka_write_options",
    "write_messages",
]


#: librdkafka settings and their Java client equivalents (the JVM path's producers are Java's).
_SAME = {
    "security.protocol",
    "sasl.mechanism",
    "ssl.endpoint.identification.algorithm",
    "linger.ms",
    "batch.size",
    "compression.type",
    "request.timeout.ms",
    "retry.backoff.ms",
    "client.id",
    "acks",
    "enable.idempotence",
    "max.in.flight.requests.per.connection",
}
_RENAMED = {
    "sasl.mechanisms": "sasl.mechanism",
    "compression.codec": "compression.type",
    "message.timeout.ms": "delivery.timeout.ms",
    "delivery.timeout.ms": "delivery.timeout.ms",
    "message.max.bytes": "max.request.size",
    "request.required.acks": "acks",
}
_LOGIN = {
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}
#: librdkafka-only settings that change nothing the Java producer needs.
_IGNORED = {
    "queue.buffering.max.ms",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "batch.num.messages",
    "log_level",
    "log.connection.close",
    "socket.keepalive.enable",
    "statistics.interval.ms",
}


def java_client_options(
    config: Mapping[str, Any], *, unknown: str, unsupported: str
) -> dict[str, str]:
    """Java Kafka client options (``kafka.``-prefixed, as Spark's Kafka source and writer take
    them) for librdkafka-style ``config``: the settings with a Java equivalent, SASL credentials
    as a JAAS configuration, a PEM CA file as a truststore.

    Raises ConfigError with ``unknown`` (formatted with ``key``) for a setting that has no Java
    equivalent here, and ``unsupported`` (formatted with ``mechanism``) for a SASL mechanism
    without a login module here: each says who needed it and what to do instead."""
    options: dict[str, str] = {}
    config = dict(config)
    username, password = config.pop("sasl.username", None), config.pop("sasl.password", None)
    ca = config.pop("ssl.ca.location", None)
    for key, value in config.items():
        if key in _RENAMED:
            options["kafka." + _RENAMED[key]] = str(value)
        elif key in _SAME:
            options["kafka." + key] = str(value)
        elif key in _IGNORED or key.startswith("bootstrap.servers"):
            continue
        else:
            raise ConfigError(unknown.format(key=key))
    if username is not None:
        mechanism = options.get("kafka.sasl.mechanism", "PLAIN").upper()
        module = _LOGIN.get(mechanism)
        if module is None:
            raise ConfigError(unsupported.format(mechanism=mechanism))
        quoted = [
            str(v).replace("\\", "\\\\").replace('"', '\\"') for v in (username, password or "")
        ]
        options["kafka.sasl.jaas.config"] = (
            f'{module} required username="{quoted[0]}" password="{quoted[1]}";'
        )
    if ca is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = str(ca)
    if options.get("kafka.ssl.endpoint.identification.algorithm") == "none":
        options["kafka.ssl.endpoint.identification.algorithm"] = ""
    return options


#: How long the broker may hold a fetch of Spark's Kafka source that finds no new record (the
#: Java consumer's ``fetch.max.wait.ms``, 500 by default). Our reads end at offsets known
#: before they start, yet each task's consumer still waited once for the whole long poll: a
#: read of six messages took 0.7 s with the default and 0.25 s with this.
FETCH_MAX_WAIT_MS = 10


def kafka_read_options(
    bootstrap_servers: str, config: Mapping[str, Any], *, user: str
) -> dict[str, str]:
    """Spark's Kafka source options for librdkafka-style ``config`` (security settings; producer
    settings dropped); ``user`` names who reads, in the error for a key without a Java equivalent.

    ``kafka.isolation.level`` is ``read_committed`` unless ``config`` says ``read_uncommitted``
    (kept, with a warning: see `cdc_emitter.kafka.config.reader_isolation`).
    ``kafka.fetch.max.wait.ms`` is `FETCH_MAX_WAIT_MS` unless ``config`` gives
    ``fetch.wait.max.ms``."""
    producer_only = {
        "acks",
        "enable.idempotence",
        "delivery.timeout.ms",
        "linger.ms",
        "batch.size",
        "compression.type",
        "max.request.size",
        "max.in.flight.requests.per.connection",
    }
    isolation = reader_isolation(config)
    fetch_wait = str(config.get("fetch.wait.max.ms", FETCH_MAX_WAIT_MS))
    options = java_client_options(
        {k: v for k, v in config.items() if k not in ("isolation.level", "fetch.wait.max.ms")},
        unknown=f"kafka_options key {{key!r}} has no equivalent in Spark's Kafka source, which "
        f"{user} uses: leave it out",
        unsupported=f"sasl.mechanism {{mechanism!r}} is not supported by {user}",
    )
    return {
        "kafka.bootstrap.servers": bootstrap_servers,
        **{k: v for k, v in options.items() if k[len("kafka.") :] not in producer_only},
        "kafka.isolation.level": isolation,
        "kafka.fetch.max.wait.ms": fetch_wait,
    }


def kafka_write_options(
    bootstrap_servers: str, topic: str, producer_config: Mapping[str, Any]
) -> dict:
    """Options for Spark's Kafka writer from the sink's librdkafka ``producer_config``.

    Raises ConfigError naming a setting that has no Java equivalent here (the sink's
    ``encoder="python"`` takes every librdkafka setting)."""
    # acks=all; not idempotent: the Java producer's flush was seen to wait forever (not
    # delivery.timeout.ms) when two of three replicas were down, and a retry's duplicates are
    # harmless here — readers discard duplicate updates
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "topic": topic,
        "kafka.acks": "all",
        "kafka.enable.idempotence": "false",
        "kafka.delivery.timeout.ms": "120000",
        "includeHeaders": "true",
    }
    options.update(
        java_client_options(
            producer_config,
            unknown="producer_config key {key!r} has no equivalent in Spark's Kafka writer, which the "
            "sink's JVM data path uses: pass encoder='python' to write with librdkafka",
            unsupported="sasl.mechanism {mechanism!r} is not supported by the JVM data path: pass "
            "encoder='python'",
        )
    )
    # Java refuses a delivery timeout below linger.ms + request.timeout.ms (30 s by default)
    delivery = int(options["kafka.delivery.timeout.ms"])
    linger = int(options.get("kafka.linger.ms", 5))
    if "kafka.request.timeout.ms" not in options and delivery < 30000 + linger:
        options["kafka.request.timeout.ms"] = str(max(1, delivery - linger))
    # a send waits for metadata up to max.block.ms (60 s by default): no longer than a delivery
    options.setdefault("kafka.max.block.ms", str(delivery))
    # update arrays are tens to hundreds of KB: Java's default batch of 16 KB sends each in a
    # request of its own (all to the same partitions); librdkafka's default of 1,000,000 bytes
    # lets a request carry several (measured: a 315-message write of 70 MB, 0.34 s → 0.25 s)
    options.setdefault("kafka.batch.size", "1000000")
    # lz4, as the sink's librdkafka producers (kafka.config.PRODUCER_DEFAULTS): every way of writing
    # sends the broker the same compressed batches (4M wide rows, a new sink's batch, medians of
    # 4 interleaved: 6.67 s against 6.92 s uncompressed on one machine; more across a network)
    options.setdefault("kafka.compression.type", "lz4")
    if options["kafka.acks"] not in ("all", "-1"):
        raise ConfigError(f"acks={options['kafka.acks']!r}: the sink needs acks=all")
    return options


def write_messages(
    messages: Any,
    options: Mapping[str, str],
    headers: Sequence[tuple[str, bytes]],
    *,
    where: Any = None,
) -> None:
    """Write the messages that hold updates with Spark's Kafka writer (one Spark job): those with
    a value, or those of ``where`` (a condition that implies a value), in the same step.

    A password in the options (``kafka.sasl.jaas.config``) is kept out of what Spark prints
    (its option redaction is extended to that key) and out of Py4J's debug log."""
    # one SQL expression, parsed on the JVM: built from Columns, the headers took some 130 round
    # trips to it per batch
    for key, _ in headers:
        if not re.fullmatch(r"[\w.-]+", key):
            raise ValueError(
                f"a header name of letters, digits, '.', '_' and '-' only, not {key!r}"
            )
    header_col = F.expr(
        "array("
        + ", ".join(
            f"named_struct('key', '{key}', 'value', X'{bytes(value).hex()}')"
            for key, value in headers
        )
        + ") AS headers"
    )
    out = messages.where("value IS NOT NULL" if where is None else where).select(
        F.col("value"), F.col("partition"), header_col
    )
    secret = "kafka.sasl.jaas.config" in options
    py4j = logging.getLogger("py4j")
    level = py4j.level
    if secret:
        _redact_jaas(messages.sparkSession)
        py4j.setLevel(
            max(logging.INFO, py4j.getEffectiveLevel())
        )  # Py4J logs each command at DEBUG
    try:
        writer = out.write.mode("append").format("kafka")  # append: what Spark's Kafka writer takes
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save()
    finally:
        py4j.setLevel(level)


def _redact_jaas(spark: Any) -> None:
    key = "spark.sql.redaction.options.regex"
    current = spark.conf.get(key, "(?i)url")
    if "jaas" not in current:
        spark.conf.set(key, f"{current}|(?i)sasl\\.jaas\\.config")


_KAFKA_CAUSE = re.compile(r"(org\.apache\.kafka\.common\.errors\.\w+: [^\n]*)")


def kafka_cause(exc: BaseException) -> str | None:
    """The Kafka client's own error behind a failed Spark write (the innermost one), if any."""
    found = _KAFKA_CAUSE.findall(str(exc))
    return found[-1].strip() if found else None
