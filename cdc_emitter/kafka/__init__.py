"""Kafka I/O through confluent-kafka (librdkafka): producing, reading, topics, the topic's
frontier, claims and the schema registry.

The only package that imports ``confluent_kafka``. Moves bytes and headers; may import
``protocol`` and ``errors``, never Spark.

- `cdc_emitter.kafka.config`: client settings, redaction, making clients;
- `cdc_emitter.kafka.preflight`: the checks a command runs before its real work;
- `cdc_emitter.kafka.producer`: `CdcProducer`;
- `cdc_emitter.kafka.claims`: the transactional producer of progress statements (claims);
- `cdc_emitter.kafka.topics`: `ensure_topic`, `topic_settings`;
- `cdc_emitter.kafka.reading`: `read_topic`, `TopicScan`, end offsets and the last messages of
  each partition;
- `cdc_emitter.kafka.frontier`: the topic's frontier, read from its tail;
- `cdc_emitter.kafka.topic_schema`: the data schema a topic was written with;
- `cdc_emitter.kafka.registry`: the schema registry.

The names below are also the module ``cdc_emitter.kafka_io`` of release 0.1.
"""

from cdc_emitter.kafka.config import (
    BROKER_TIMEOUT,
    PRODUCER_DEFAULTS,
    consumer_config,
    librdkafka_log,
    producer_config,
    redact_config,
    redact_text,
)
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import (
    KafkaRecord,
    TopicOffsets,
    TopicScan,
    end_offsets,
    last_messages,
    partition_end,
    partition_tails,
    read_topic,
)
from cdc_emitter.kafka.topics import ensure_topic, topic_settings

#: the name of `partition_tails` in release 0.1
tail = partition_tails

__all__ = [
    "BROKER_TIMEOUT",
    "PRODUCER_DEFAULTS",
    "CdcProducer",
    "KafkaRecord",
    "TopicOffsets",
    "TopicScan",
    "consumer_config",
    "end_offsets",
    "ensure_topic",
    "last_messages",
    "librdkafka_log",
    "partition_end",
    "partition_tails",
    "producer_config",
    "read_topic",
    "redact_config",
    "redact_text",
    "topic_settings",
]
