"""Spark helpers shared by the sink, the reader and the converters: the schema mapping, the
Columns every data path uses, Spark's Kafka options, session set-up and table reading.

DataFrame API only, so everything here also runs on Spark Connect. May import ``protocol``,
``kafka`` and ``errors``; never the sink, the readers or the CLI.
"""
