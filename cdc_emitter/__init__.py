"""cdc-emitter: Spark changefeeds into Kafka in the Materialize CDC format, and a verifying reader.

The protocol core (:mod:`cdc_emitter.core`) and the Avro codec (:mod:`cdc_emitter.codec`) import
neither Kafka nor Spark; ``CdcSink`` is imported lazily so ``import cdc_emitter`` stays light.
"""

from .core import CdcReader, Progress, Update, Violation, consolidate, progress_for, progress_from_counts
from .errors import (
    BadInputError,
    BrokerError,
    CdcError,
    ConcurrentWriterError,
    ConfigError,
    DecodeError,
    DeliveryError,
    LateUpdateError,
    RefusedError,
    ReplayError,
    SchemaError,
)
from .sink_metrics import BatchResult

__version__ = "0.1.0"

__all__ = [
    "BadInputError", "BatchResult", "BrokerError", "CdcError", "CdcReader", "CdcSink", "ConcurrentWriterError",
    "ConfigError", "DecodeError",
    "DeliveryError", "LateUpdateError", "Progress", "RefusedError", "ReplayError", "SchemaError", "Update", "Violation",
    "configure_spark", "consolidate", "progress_for", "progress_from_counts", "read_cdc",
]


def __getattr__(name):
    if name == "CdcSink":
        from .sink import CdcSink

        return CdcSink
    if name == "read_cdc":
        from .spark_reader import read_cdc

        return read_cdc
    if name == "configure_spark":
        from .spark_setup import configure_spark

        return configure_spark
    raise AttributeError(f"module 'cdc_emitter' has no attribute {name!r}")
