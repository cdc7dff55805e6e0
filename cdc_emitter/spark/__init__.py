"""Spark helpers shared by the sink, the reader and the converters: the schema mapping, the
Columns every data path uses, Spark's Kafka options, session set-up and table reading.

DataFrame API only, so everything here also runs on Spark Connect. May import ``protocol``,
``kafka`` and ``errors``; never the sink, the readers or the CLI.

- `cdc_emitter.spark.schema`: Spark types to Avro schemas; `cdc_emitter.spark.ddl` DDL column
  lists as Spark schemas, without the JVM;
- `cdc_emitter.spark.avro_types`: the other way, Avro schemas and values to Spark's;
- `cdc_emitter.spark.columns`: the Columns every data path uses;
- `cdc_emitter.spark.avro_length`: the length of a decoded value's Avro encoding, as a Column;
- `cdc_emitter.spark.kafka`: Spark's Kafka source and sink options;
- `cdc_emitter.spark.settings`: what the sink reads of a session's settings;
- `cdc_emitter.spark.setup`: `configure_spark`;
- `cdc_emitter.spark.session`: sessions for the CLI;
- `cdc_emitter.spark.tables`: reading tables for the CLI; `cdc_emitter.spark.sources` checks
  local input files before Spark starts (the files of a directory as Spark lists them:
  `cdc_emitter.spark.data_files`), and `cdc_emitter.spark.malformed` finds the first bad line
  of one;
- `cdc_emitter.spark.errors`: the readable first line of a Spark error.

The names of the module ``cdc_emitter.sources`` of release 0.1 are found here too, imported when
first asked for (importing this package imports no Spark).
"""

from __future__ import annotations

import importlib
from typing import Any

#: the names of ``cdc_emitter.sources`` (release 0.1) -> the module that has them now
_SOURCES = {
    "spark_error_text": "cdc_emitter.spark.errors",
    "DELTA_PACKAGES": "cdc_emitter.spark.session",
    "delta_package": "cdc_emitter.spark.session",
    "reader_conf": "cdc_emitter.spark.session",
    "spark_session": "cdc_emitter.spark.session",
    "FORMATS": "cdc_emitter.spark.tables",
    "columns_struct": "cdc_emitter.spark.tables",
    "read_table": "cdc_emitter.spark.tables",
    "spark_struct": "cdc_emitter.spark.tables",
}


def __getattr__(name: str) -> Any:
    if name in _SOURCES:
        return getattr(importlib.import_module(_SOURCES[name]), name)
    raise AttributeError(f"module 'cdc_emitter.spark' has no attribute {name!r}")
