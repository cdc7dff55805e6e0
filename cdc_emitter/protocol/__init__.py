"""The CDCv2 protocol, pure: updates, progress statements, the reader and the Avro codec.

Imports nothing of Kafka or Spark, and nothing of this package outside ``protocol`` and
``errors``. Everything else builds on it.
"""
