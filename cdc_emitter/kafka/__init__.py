"""Kafka I/O through confluent-kafka (librdkafka): producing, reading, topics, the topic's
frontier and the schema registry.

The only package that imports ``confluent_kafka``. Moves bytes and headers; may import
``protocol`` and ``errors``, never Spark.
"""
