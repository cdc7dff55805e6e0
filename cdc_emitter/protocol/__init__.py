"""The CDCv2 protocol, pure: updates, progress statements, the reader and the Avro codec.

Imports nothing of Kafka or Spark, and nothing of this package outside ``protocol`` and
``errors``. Everything else builds on it.

- `cdc_emitter.protocol.updates`: `Update`, `Progress`, `consolidate` and the functions that
  build progress statements;
- `cdc_emitter.protocol.reader`: `CdcReader` and its counting variant; what it remembers in
  `cdc_emitter.protocol.ledgers`, and strict mode's memory in `cdc_emitter.protocol.bloom`;
- `cdc_emitter.protocol.codec`: the Avro wire format; `cdc_emitter.protocol.fast_decode` its
  fast decoder for one data layout, `cdc_emitter.protocol.arrow_avro` its encoder from Arrow
  columns, `cdc_emitter.protocol.varint` the zig-zag longs both write, and
  `cdc_emitter.protocol.converters` fastavro's values to hashable ones and back;
- `cdc_emitter.protocol.schemas`: the documented schemas; `cdc_emitter.protocol.schema_match`
  whether one data schema reads what another wrote;
- `cdc_emitter.protocol.json_forms`: decoded values as JSON text;
- `cdc_emitter.protocol.headers`: our message headers;
- `cdc_emitter.protocol.materialize`: the Materialize ``CREATE SOURCE`` statement.

The names below are also the module ``cdc_emitter.core`` of release 0.1.
"""

from cdc_emitter.protocol.ledgers import ExactMemory, SortedCounts, StatementLedger
from cdc_emitter.protocol.reader import (
    STRICT_MODES,
    VIOLATION_KINDS,
    CdcReader,
    CountingReader,
    Pending,
    Strict,
    TimeCounts,
    Waiting,
)
from cdc_emitter.protocol.updates import (
    MAX_LONG,
    MIN_LONG,
    NAN,
    Progress,
    Update,
    Violation,
    canonical_nan,
    consolidate,
    progress_for,
    progress_from_counts,
    split_progress,
)

__all__ = [
    "MAX_LONG",
    "MIN_LONG",
    "NAN",
    "STRICT_MODES",
    "VIOLATION_KINDS",
    "CdcReader",
    "CountingReader",
    "ExactMemory",
    "Pending",
    "Progress",
    "SortedCounts",
    "StatementLedger",
    "Strict",
    "TimeCounts",
    "Update",
    "Violation",
    "Waiting",
    "canonical_nan",
    "consolidate",
    "progress_for",
    "progress_from_counts",
    "split_progress",
]
