"""``CdcSink`` and its data paths: a Spark DataFrame written to Kafka as CDCv2.

`cdc_emitter.sink.sink` decides each batch's interval and writes its progress statement;
the data paths write its updates: `cdc_emitter.sink.distributed` (one Spark job, the
default), `cdc_emitter.sink.driver` (small batches, finished on the driver) and
`cdc_emitter.sink.python_path` (encoded by Python on the executors). May import
``protocol``, ``kafka``, ``spark`` and ``errors``.

``CdcSink`` is imported lazily, so the pure modules here (interval, batch, digest, small_batch,
result) load without pyspark.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_emitter.sink.sink import CdcSink

__all__ = ["CdcSink"]


def __getattr__(name: str) -> Any:
    if name == "CdcSink":
        from cdc_emitter.sink.sink import CdcSink

        return CdcSink
    raise AttributeError(f"module 'cdc_emitter.sink' has no attribute {name!r}")
