"""Converters: other changefeeds written as CDCv2 through ``CdcSink`` — a Delta table's change
data feed, and CockroachDB's and YDB's JSON changefeeds in Kafka.

`cdc_emitter.convert.plan` is pure (which versions a micro-batch may close); the others
run Structured Streaming queries. May import everything but the CLI.
"""
