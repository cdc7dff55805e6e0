"""cdc-emitter: Spark changefeeds into Kafka in the Materialize CDC format, and a verifying reader.

The package by domain, each layer importing only those before it:

- `cdc_emitter.protocol`: CDCv2 itself, pure (updates, the reader, the Avro codec);
- `cdc_emitter.kafka`: Kafka I/O, the only user of confluent-kafka;
- `cdc_emitter.spark`: Spark helpers (DataFrame API only);
- `cdc_emitter.sink`, `cdc_emitter.read`, `cdc_emitter.convert`: what users run;
- `cdc_emitter.cli`: the ``cdc-emitter`` command.

``CdcSink``, ``read_cdc``, ``register`` (the ``cdcv2`` streaming source),
``read_cdc_stream`` (the same batches in a loop of the caller's, on any PySpark) and
``configure_spark`` are imported lazily, so ``import cdc_emitter``
needs neither Spark nor a broker.
"""

from typing import TYPE_CHECKING, Any

from cdc_emitter import _moved
from cdc_emitter.errors import (
    BadInputError,
    BrokerError,
    CdcError,
    ConcurrentWriterError,
    ConfigError,
    DecodeError,
    DeliveryError,
    InterruptedBatchError,
    LateUpdateError,
    RefusedError,
    ReplayError,
    SchemaError,
    ViolationError,
)
from cdc_emitter.protocol.reader import CdcReader
from cdc_emitter.protocol.updates import (
    Progress,
    Update,
    Violation,
    consolidate,
    progress_for,
    progress_from_counts,
)
from cdc_emitter.sink.result import BatchResult

if TYPE_CHECKING:
    from cdc_emitter.read.cdc_stream import read_cdc_stream
    from cdc_emitter.read.spark_reader import read_cdc
    from cdc_emitter.read.stream_source import register
    from cdc_emitter.sink.sink import CdcSink
    from cdc_emitter.spark.setup import configure_spark

__version__ = "0.3.0"

__all__ = [
    "BadInputError",
    "BatchResult",
    "BrokerError",
    "CdcError",
    "CdcReader",
    "CdcSink",
    "ConcurrentWriterError",
    "ConfigError",
    "DecodeError",
    "DeliveryError",
    "InterruptedBatchError",
    "LateUpdateError",
    "Progress",
    "RefusedError",
    "ReplayError",
    "SchemaError",
    "Update",
    "Violation",
    "ViolationError",
    "configure_spark",
    "consolidate",
    "progress_for",
    "progress_from_counts",
    "read_cdc",
    "read_cdc_stream",
    "register",
]

_moved.install()

_LAZY = {
    "CdcSink": "cdc_emitter.sink.sink",
    "read_cdc": "cdc_emitter.read.spark_reader",
    "read_cdc_stream": "cdc_emitter.read.cdc_stream",
    "register": "cdc_emitter.read.stream_source",
    "configure_spark": "cdc_emitter.spark.setup",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cdc_emitter' has no attribute {name!r}")
