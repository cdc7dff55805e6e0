"""What the sink learns from the topic, and checks against it, before it writes a batch.

The topic's frontier (read from its tail, or carried from this sink's last statement), the data
schema named in its progress headers, the schema registry's id for a batch's schema, whether it
takes messages as large as the sink makes (creating it when asked), and whether it holds only
CDCv2 messages. The sink keeps the clients and the
carried frontier; the functions here are handed what they need.

Guarantees:

- a topic whose ``max.message.bytes`` is below the sink's messages plus `RECORD_OVERHEAD` is
  refused with `ConfigError` before any message;
- a batch whose data schema differs from the topic's is refused with `SchemaError` (nothing
  written), unless a registry is there to put the difference to a compatibility rule other
  than ``NONE``;
- a topic whose tail holds a message that is not CDCv2 is refused with `SchemaError` before any
  message.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from cdc_emitter.errors import ConfigError, DecodeError, SchemaError
from cdc_emitter.kafka.frontier import TopicFrontier, topic_frontier
from cdc_emitter.kafka.reading import TopicOffsets
from cdc_emitter.kafka.registry import SchemaRegistry, schema_text_of, subject_for
from cdc_emitter.kafka.topics import ensure_topic, topic_settings
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.protocol.schemas import schema_differences, type_text

log = logging.getLogger("cdc_emitter.sink")  # CdcSink's logger: one name for the sink's lines

#: Bytes a Kafka record batch adds around one message's value (headers included), kept free
#: below the topic's max.message.bytes.
RECORD_OVERHEAD = 1024
#: Kafka's default max.message.bytes for a topic (1 MiB + 12).
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
#: How many of its own batches' statements a sink remembers for re-runs (Spark re-runs only the
#: last batch; the sink log and the topic's tail hold the rest).
CARRIED_BATCHES = 64


def read_frontier(
    bootstrap_servers: str,
    topic: str,
    *,
    framing: Any,
    schema_id: int,
    config: dict,
    offsets: TopicOffsets,
    broker_timeout: float,
    back_to: int | None = None,
) -> TopicFrontier:
    """The topic's current frontier, read from its tail (see `topic_frontier`; ``back_to``:
    with every statement since the one holding that time)."""
    # progress statements decode the same whatever the data schema: use a one-column one
    codec = CdcCodec(
        {"type": "record", "name": "data", "fields": [{"name": "x", "type": "long"}]},
        framing=framing,
        schema_id=schema_id,
    )
    skip = 5 if framing == "confluent" else 0

    def progress_only(value: bytes) -> Any:  # an update array is not decoded just to be skipped
        if skip and (len(value) <= skip or value[0] != 0):
            raise DecodeError("no Confluent wire-format header (magic byte 0, schema id)")
        return None if value[skip : skip + 1] == b"\x00" else codec.decode(value)

    return topic_frontier(
        bootstrap_servers,
        topic,
        config=config,
        decode=progress_only,
        offsets=offsets,
        broker_timeout=broker_timeout,
        back_to=back_to,
    )


def carried_frontier(
    before: TopicFrontier | None,
    writer: str,
    batch_id: int | None,
    lower: int,
    upper: int | None,
    avro_data: dict,
    digest: str,
    last_offset: int | None,
) -> TopicFrontier | None:
    """The frontier our statement just set, as the next batch would read it from the tail (with
    the statements of earlier batches seen, for a re-run to find); None when not known.
    ``last_offset``: of the last record written to partition 0 (the claim's commit marker)."""
    if last_offset is None:
        return None
    batches = dict(before.batches) if before is not None else {}
    digests = dict(before.digests) if before is not None else {}
    batches[(writer, batch_id)] = (lower, upper)
    digests[(writer, batch_id)] = digest
    for key in list(batches)[:-CARRIED_BATCHES]:
        batches.pop(key)
        digests.pop(key, None)
    return TopicFrontier(
        upper,
        writer,
        batch_id,
        lower,
        upper,
        True,
        batches,
        schema=json.dumps(avro_data, separators=(",", ":")),
        digests=digests,
        partition0_end=last_offset + 1,
    )


def writable_topic(
    bootstrap_servers: str,
    topic: str,
    offsets: TopicOffsets,
    *,
    create: bool,
    partitions: int,
    config: dict,
    max_message_bytes: int,
    broker_timeout: float,
) -> list[int] | None:
    """Make sure the topic exists (or is created) and takes messages as large as the sink makes;
    return the partitions update messages go to (None: partition 0 only, see `Batch`)."""
    needed = max_message_bytes + RECORD_OVERHEAD
    created = (
        {"max.message.bytes": str(needed)} if needed > KAFKA_DEFAULT_MAX_MESSAGE_BYTES else None
    )
    # asked through the client kept for the frontier, which the tail read then reuses
    count = offsets.partition_count()
    if count is None:  # missing: created, or refused with what to do
        count = ensure_topic(
            bootstrap_servers,
            topic,
            create=create,
            partitions=partitions,
            config=config,
            topic_config=created,
            timeout=broker_timeout,
        )
    update_partitions = list(range(1, count)) if count > 1 else None
    settings = topic_settings(bootstrap_servers, topic, config=config, timeout=broker_timeout)
    limit = (settings or {}).get("max.message.bytes")
    if limit is not None and int(limit) < needed:
        raise ConfigError(
            f"topic {topic!r} accepts messages of at most {int(limit)} bytes (its "
            f"max.message.bytes), but this sink makes messages of up to {max_message_bytes} "
            f"bytes plus up to {RECORD_OVERHEAD} of record overhead: pass max_message_bytes="
            f"{int(limit) - RECORD_OVERHEAD} or less, or raise the topic's max.message.bytes"
        )
    return update_partitions


def schema_changes(
    topic: str,
    state: TopicFrontier,
    avro_data: dict,
    codec: CdcCodec,
    *,
    framing: Any,
    with_registry: bool,
) -> list[str]:
    """Refuse a batch whose data schema is not the one the topic was written with.

    Kafka is append-only: messages under two data schemas leave a topic no single schema
    reads. The topic's schema comes from the newest progress statement's header; a topic
    without one (another writer) is checked by decoding its newest update message.

    With a schema registry, readers resolve each message by its schema id, so a different
    schema is not refused here: its differences are returned for `register_schema` to put
    to the registry's compatibility rule.
    """
    way_out = (
        "Nothing was written. Write this data to a new topic, or give the batch exactly "
        "the topic's columns (names, order, types and nullability)"
    )
    if state.schema is not None:
        try:
            written = json.loads(state.schema)
        except ValueError:
            written = None
        differences = [] if written is None else schema_differences(written, avro_data)
        if differences and with_registry:
            return differences
        if differences:
            raise SchemaError(
                f"topic {topic!r} was written with another data schema than this "
                f"batch's: {'; '.join(differences)}. {way_out}"
            )
        return []
    sample = state.update_sample
    skip = 5 if framing == "confluent" else 0
    if sample is not None and len(sample) > skip and sample[skip] == 0:
        try:
            codec.decode(sample)
        except DecodeError as exc:
            fields = ", ".join(f"{f['name']} {type_text(f['type'])}" for f in avro_data["fields"])
            raise SchemaError(
                f"topic {topic!r} holds update messages that do not decode with this "
                f"batch's data schema ({fields}): {exc}. {way_out}"
            ) from None
    return []


def register_schema(
    registry: SchemaRegistry, topic: str, avro_data: dict, evolves: list[str]
) -> int:
    """The registry's id for this batch's union schema under ``<topic>-value``.

    A data schema that differs from the topic's (``evolves``) is left to the subject's
    compatibility rule, which must then be one (not ``NONE``): readers resolve the older
    messages into the newer schema by their ids only if the registry vouches they can.
    """
    subject = subject_for(topic)
    if evolves:
        level = registry.compatibility(subject)
        if level.upper() == "NONE":
            raise SchemaError(
                f"topic {topic!r} was written with another data schema than this batch's: "
                f"{'; '.join(evolves)}; the {registry.where} would accept any schema for "
                f"subject {subject!r} (compatibility NONE), so it cannot vouch that readers "
                "resolve the older messages. Nothing was written. Set the subject's "
                "compatibility (BACKWARD, FULL, ...) or write this data to a new topic"
            )
    try:
        schema_id = registry.register(subject, schema_text_of(avro_data))
    except SchemaError as exc:
        raise SchemaError(f"topic {topic!r}: {exc}. Nothing was written") from None
    log.info(
        "cdc sink topic=%s: %s gave schema id %d for subject %s",
        topic,
        registry.where,
        schema_id,
        subject,
    )
    return schema_id


def check_cdc(topic: str, state: TopicFrontier, framing: Any) -> None:
    """Refuse a topic whose tail holds a message that is neither an update array nor a progress
    statement (another tool's topic, a typo in the topic name): `SchemaError`, nothing written."""
    if state.foreign is None:
        return
    partition, offset, why = state.foreign
    raise SchemaError(
        f"topic {topic!r} holds messages that are not CDCv2 (partition {partition} offset "
        f"{offset}, read with framing={framing!r}: {why}). Nothing was written. Check the topic "
        "name, or the framing the topic was written with; write changefeeds to a topic of "
        "their own"
    )
