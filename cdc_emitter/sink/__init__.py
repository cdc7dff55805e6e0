"""``CdcSink`` and its data paths: a Spark DataFrame written to Kafka as CDCv2.

`cdc_emitter.sink.sink` takes each batch through its phases — its interval decided
(`cdc_emitter.sink.decide`, `cdc_emitter.sink.topic`), its path chosen
(`cdc_emitter.sink.paths`), its progress statement written (`cdc_emitter.sink.commit`); the
data paths write its updates: `cdc_emitter.sink.distributed` (one Spark job, the
default), `cdc_emitter.sink.driver` (small batches, finished on the driver) and
`cdc_emitter.sink.python_path` (encoded by Python on the executors). May import
``protocol``, ``kafka``, ``spark`` and ``errors``.

``CdcSink`` is imported lazily, so the pure modules here (interval, batch, digest, small_batch,
result, interrupted) load without pyspark.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_emitter.sink.sink import CdcSink

__all__ = ["CdcSink"]


#: where the other names of the 0.1 module ``cdc_emitter.sink`` live now (kept for one release)
_MOVED_FROM_01 = ("cdc_emitter.sink.sink", "cdc_emitter.sink.options", "cdc_emitter.sink.topic")


def __getattr__(name: str) -> Any:
    if name == "CdcSink":
        from cdc_emitter.sink.sink import CdcSink

        return CdcSink
    if not name.startswith("_"):
        import importlib
        import importlib.util

        if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a module of the package
            return importlib.import_module(f"{__name__}.{name}")
        for module in _MOVED_FROM_01:
            found = getattr(importlib.import_module(module), name, None)
            if found is not None:
                return found
    raise AttributeError(f"module 'cdc_emitter.sink' has no attribute {name!r}")
