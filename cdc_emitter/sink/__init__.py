"""``CdcSink`` and its data paths: a Spark DataFrame written to Kafka as CDCv2.

May import ``protocol``, ``kafka``, ``spark`` and ``errors``. `cdc_emitter.sink.sink` holds
`CdcSink` and takes each batch through its phases; the work of each is done here:

- plan: `cdc_emitter.sink.options` (the constructor's arguments), `cdc_emitter.sink.layout`
  (the batch's columns), `cdc_emitter.sink.decide` and `cdc_emitter.sink.interval` (its
  interval), `cdc_emitter.sink.log` (the sink log), `cdc_emitter.sink.resume` (a batch's own
  earlier claim), `cdc_emitter.sink.clients` and `cdc_emitter.sink.topic` (the driver's Kafka
  clients, the frontier, the topic's schema and settings);
- check: `cdc_emitter.sink.paths` chooses the data path, handed the batch through
  `cdc_emitter.sink.batch`; the paths are `cdc_emitter.sink.distributed` (one Spark job; its
  plan in `cdc_emitter.sink.plan`, its figures in `cdc_emitter.sink.plan_stats`),
  `cdc_emitter.sink.driver` (finished on the driver, `cdc_emitter.sink.small_batch`) and
  `cdc_emitter.sink.python_path` (on the executors, `cdc_emitter.sink.python_tasks`); every
  row is checked by `cdc_emitter.sink.row_checks`; `cdc_emitter.sink.digest` tells a re-run's
  data;
- claim: `cdc_emitter.sink.claiming` commits it, `cdc_emitter.sink.claim` decides where it goes;
- write: `cdc_emitter.sink.commit` (the statement's messages, the sink log record);
  `cdc_emitter.sink.result` is what a batch wrote, `cdc_emitter.sink.interrupted` a batch its
  query's stop interrupted.

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
