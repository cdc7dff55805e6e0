"""The arguments of `CdcSink`: their types, defaults and checks, before the sink holds them.

`normalise` checks the constructor's arguments in one place and returns them as the sink keeps
them. No Spark, no broker: a bad argument fails when the sink is made, not at its first batch.

Guarantees:

- every argument out of its range, and every conflicting pair, raises `ConfigError` naming it
  (in a fixed order: the first bad argument found is the one named);
- ``producer_config`` is copied: the caller's mapping is never mutated;
- ``max_message_bytes`` fits the producer's ``message.max.bytes`` with 1 KiB of record overhead;
- a schema registry goes only with the Confluent framing, and without a fixed ``schema_id``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from cdc_emitter.errors import ConfigError
from cdc_emitter.kafka.config import PRODUCER_DEFAULTS
from cdc_emitter.kafka.registry import SchemaRegistry
from cdc_emitter.kafka.topics import check_topic_name
from cdc_emitter.protocol.updates import MAX_LONG

DEFAULT_MAX_MESSAGE_BYTES = 900_000
#: The data paths (see the ``encoder`` argument of `CdcSink`).
Encoder = Literal["auto", "jvm", "python"]
ENCODERS: tuple[Encoder, ...] = ("auto", "jvm", "python")
#: What a column-mode update below the batch's lower bound does (see ``late``).
Late = Literal["error", "advance"]
#: By default, a batch after one of at most this many rows and bytes of messages is finished on
#: the driver (`cdc_emitter.sink.driver`): a Spark job and its shuffle cost more than the
#: driver's work on so few rows (measured on 2 cores: 0.32 s against 0.80 s per 250,000-row
#: batch; at 500,000 still ahead, but the driver's work does not spread over a cluster as the
#: executors' does). After more rows that consolidated to at most this many, the executors
#: consolidate and the driver finishes.
SMALL_BATCH_ROWS = 250_000
SMALL_BATCH_BYTES = 16 * 2**20


class Options(NamedTuple):
    """The arguments that `normalise` checks and converts, as the sink keeps them."""

    registry: SchemaRegistry | None  # made from schema_registry_url and its config
    producer_config: dict  # a copy of the caller's
    max_message_bytes: int
    broker_timeout: float


def normalise(
    *,
    topic: str,
    time_offset: int,
    late: Any,
    framing: Any,
    schema_id: int,
    schema_registry_url: str | None,
    schema_registry_config: Mapping[str, Any] | None,
    producer_config: Mapping[str, Any] | None,
    max_message_bytes: int,
    encoder: Any,
    broker_timeout: float,
    on_batch: Callable[..., None] | None,
    small_batch_rows: int,
) -> Options:
    """Check `CdcSink`'s arguments and return those it keeps converted.

    Raises:
        ConfigError: an argument out of its range, conflicting arguments, or
            ``encoder="avro"`` (removed in 0.2).
    """
    check_modes(late=late, framing=framing, encoder=encoder)
    check_numbers(topic=topic, time_offset=time_offset, broker_timeout=broker_timeout)
    registry = registry_for(
        schema_registry_url, schema_registry_config, framing=framing, schema_id=schema_id
    )
    config = dict(producer_config or {})  # a copy: the caller's dict is theirs
    max_bytes = fitting_max_message_bytes(max_message_bytes, config)
    if on_batch is not None and not callable(on_batch):
        raise ConfigError(f"on_batch must be a function taking a BatchResult, not {on_batch!r}")
    if (
        isinstance(small_batch_rows, bool)
        or not isinstance(small_batch_rows, int)
        or small_batch_rows < 0
    ):
        raise ConfigError(
            f"small_batch_rows must be a non-negative integer, not {small_batch_rows!r}"
        )
    return Options(registry, config, max_bytes, float(broker_timeout))


def check_modes(*, late: Any, framing: Any, encoder: Any) -> None:
    """``late``, ``framing`` and ``encoder`` are among their values (``"avro"`` named as removed)."""
    if late not in ("error", "advance"):
        raise ConfigError(f"late must be 'error' or 'advance', not {late!r}")
    if framing not in ("confluent", "raw"):
        raise ConfigError(f"framing must be 'confluent' or 'raw', not {framing!r}")
    if str(encoder) == "avro":  # removed: say what replaces it
        raise ConfigError(
            "encoder='avro' was removed in 0.2: use 'jvm' (the default with "
            "configure_spark) or 'python'"
        )
    if encoder not in ENCODERS:
        raise ConfigError(
            f"encoder must be one of {', '.join(map(repr, ENCODERS))}, not {encoder!r}"
        )


def check_numbers(*, topic: str, time_offset: int, broker_timeout: float) -> None:
    """``time_offset`` is a non-negative long, the topic a name Kafka takes, ``broker_timeout``
    positive."""
    if (
        isinstance(time_offset, bool)
        or not isinstance(time_offset, int)
        or not 0 <= time_offset <= MAX_LONG
    ):
        raise ConfigError(f"time_offset must be a non-negative integer, not {time_offset!r}")
    check_topic_name(topic)
    if (
        isinstance(broker_timeout, bool)
        or not isinstance(broker_timeout, (int, float))
        or not broker_timeout > 0
    ):
        raise ConfigError(
            f"broker_timeout must be a positive number of seconds, not {broker_timeout!r}"
        )


def registry_for(
    url: str | None, config: Mapping[str, Any] | None, *, framing: Any, schema_id: int
) -> SchemaRegistry | None:
    """The schema registry client at ``url`` (None without one), once its arguments agree."""
    if url is not None:
        if framing != "confluent":
            raise ConfigError(
                "schema_registry_url needs framing='confluent': the registry's id "
                "travels in the Confluent header"
            )
        if schema_id:
            raise ConfigError(
                f"schema_id={schema_id} conflicts with schema_registry_url: the "
                "registry gives the id; drop schema_id"
            )
        return SchemaRegistry(url, config)
    if config:
        raise ConfigError("schema_registry_config given without schema_registry_url")
    return None


def fitting_max_message_bytes(max_message_bytes: int, producer_config: Mapping[str, Any]) -> int:
    """``max_message_bytes`` as an int, once it fits the producer's ``message.max.bytes``."""
    max_bytes = int(max_message_bytes)
    client_limit = int(
        producer_config.get("message.max.bytes", PRODUCER_DEFAULTS["message.max.bytes"])
    )
    if max_bytes + 1024 > client_limit:
        raise ConfigError(
            f"max_message_bytes={max_bytes} does not fit the producer's "
            f"message.max.bytes={client_limit} (with 1 KiB for record overhead): lower it, or raise "
            "message.max.bytes in producer_config (and the topic's max.message.bytes)"
        )
    return max_bytes


def client_config(producer_config: Mapping[str, Any]) -> dict:
    """Client (security) settings for admin/consumer clients: producer-only keys dropped."""
    skip = set(PRODUCER_DEFAULTS) | {
        "linger.ms",
        "queue.buffering.max.ms",
        "batch.num.messages",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "delivery.timeout.ms",
        "message.timeout.ms",
        "retries",
        "transactional.id",
        "partitioner",
        "request.required.acks",
        "message.send.max.retries",
        "retry.backoff.ms",
        "compression.codec",
        "sticky.partitioning.linger.ms",
    }
    return {k: v for k, v in producer_config.items() if k not in skip}
