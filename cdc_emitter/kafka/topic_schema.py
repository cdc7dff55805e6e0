"""The data schema a topic was written with, from the header of its progress statements.

Every progress statement a sink writes carries the data record schema it was written with, as
compact JSON, in the `HEADER_SCHEMA` header: a reader of a topic the sink wrote needs no schema
file. The newest statement's header is taken: from the tail of every partition (cheap), and when
the tail holds none, from the whole topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cdc_emitter.errors import SchemaError
from cdc_emitter.kafka.config import BROKER_TIMEOUT
from cdc_emitter.kafka.reading import KafkaRecord, last_messages, read_topic
from cdc_emitter.protocol.headers import HEADER_KIND, HEADER_SCHEMA
from cdc_emitter.protocol.schemas import data_schema_from_text

__all__ = ["TAIL_FOR_SCHEMA", "writer_schema"]

#: Messages read back from each partition's end to find a progress statement: a batch's
#: statement is written before its updates, and transaction markers take offsets too.
TAIL_FOR_SCHEMA = 64


def writer_schema(
    bootstrap_servers: str,
    topic: str,
    config: Mapping[str, Any] | None = None,
    *,
    tail: int = TAIL_FOR_SCHEMA,
    timeout: float = BROKER_TIMEOUT,
    full_scan: bool = True,
) -> dict | None:
    """The data record schema in the `HEADER_SCHEMA` header of the newest progress statement
    of ``topic``.

    Reads the last ``tail`` messages of every partition; when they hold no statement with the
    header (and ``full_scan``), reads the whole topic from the beginning (up to its end offsets
    at that moment).

    Args:
        bootstrap_servers: The Kafka servers.
        topic: The topic.
        config: librdkafka client settings.
        tail: Messages to read back from each partition's end first.
        timeout: Seconds to wait for a broker that does not answer.
        full_scan: Read the whole topic when the tail holds no statement: False for a caller
            that has a schema already and only compares it (a long topic is not read twice).

    Returns:
        The data record schema (a dict), or None when no statement carries the header.

    Raises:
        BrokerError: The topic does not exist or the broker cannot be reached.
        SchemaError: The newest header holds no usable data record schema (naming the
            partition and offset of its statement).
    """
    records = last_messages(bootstrap_servers, topic, tail, config=config, timeout=timeout)
    found = _newest_statement(records)
    if found is None and full_scan:
        found = _newest_statement(
            read_topic(bootstrap_servers, topic, config=config, broker_timeout=timeout)
        )
    if found is None:
        return None
    record, text = found
    try:
        return data_schema_from_text(text)
    except SchemaError as exc:
        raise SchemaError(
            f"topic {topic!r} partition {record.partition} offset {record.offset}: the "
            f"{HEADER_SCHEMA} header holds no usable data schema: {exc}"
        ) from None


def _header(record: KafkaRecord, name: str) -> bytes | None:
    """The value of the last header ``name`` of ``record`` (None: absent or empty)."""
    value = None
    for key, found in record.headers or []:
        if key == name:
            value = found
    return value or None


def _newest_statement(records: Iterable[KafkaRecord]) -> tuple[KafkaRecord, str] | None:
    """The newest progress statement of ``records`` that carries the schema header, and the
    header's text: by timestamp across partitions, by offset within one."""
    best: tuple[tuple[int, int, int], KafkaRecord, bytes] | None = None
    for record in records:
        text = _header(record, HEADER_SCHEMA)
        if text is None or _header(record, HEADER_KIND) != b"progress":
            continue
        key = (record.timestamp or 0, record.partition, record.offset)
        if best is None or key > best[0]:
            best = (key, record, text)
    if best is None:
        return None
    return best[1], best[2].decode("utf-8", errors="replace")
