"""Converters: other changefeeds written as CDCv2 through ``CdcSink`` — a Delta table's change
data feed, and CockroachDB's and YDB's JSON changefeeds in Kafka.

May import everything but the CLI.

- `cdc_emitter.convert.delta`: a Delta table's change data feed, as a Structured Streaming
  query; `cdc_emitter.convert.plan` (pure) says which versions a micro-batch may close;
- `cdc_emitter.convert.changefeed`: CockroachDB's and YDB's JSON changefeeds read from Kafka;
  `cdc_emitter.convert.watermark` (pure) says which times a micro-batch may close.
"""
