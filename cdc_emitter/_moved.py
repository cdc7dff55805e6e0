"""The module paths of release 0.1, before the package was split by domain: they keep working
for one release, each with a ``DeprecationWarning`` that names the new path.

``import cdc_emitter.codec`` gives the very module object of ``cdc_emitter.protocol.codec`` (not a
copy), so patching either name patches both.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: old module name (under ``cdc_emitter.``) -> its new dotted path
MOVED: dict[str, str] = {
    "core": "protocol",  # protocol/__init__ re-exports updates.py and reader.py
    "codec": "protocol.codec",
    "_vector_avro": "protocol.arrow_avro",
    "bloom": "protocol.bloom",
    "materialize": "protocol.materialize",
    "frontier": "kafka.frontier",
    "kafka_io": "kafka",  # kafka/__init__ re-exports config, producer, topics, reading
    "registry": "kafka.registry",
    "spark_schema": "spark.schema",
    "spark_columns": "spark.columns",
    "spark_kafka": "spark.kafka",
    "spark_settings": "spark.settings",
    "spark_setup": "spark.setup",
    "sources": "spark",  # spark/__init__ finds session, tables and errors names
    "sink": "sink.sink",
    "sink_batch": "sink.batch",
    "sink_digest": "sink.digest",
    "sink_driver": "sink.driver",
    "sink_executors": "sink.distributed",
    "sink_jvm": "sink.plan",
    "sink_figures": "sink.plan_stats",
    "sink_metrics": "sink.result",
    "sink_python": "sink.python_path",
    "sink_tasks": "sink.python_tasks",
    "sink_interval": "sink.interval",
    "sinklog": "sink.log",
    "small_batch": "sink.small_batch",
    "spark_reader": "read.spark_reader",
    "verify": "read.verify",
    "decode_pool": "read.decode_pool",
    "_decode_worker": "read.decode_worker",
    "convert_plan": "convert.plan",
    "convert_delta": "convert.delta",
    "convert_kafka": "convert.changefeed",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        pass  # the module was executed under its new name


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds ``cdc_emitter.<old>`` and hands back ``cdc_emitter.<new>``, warning once per name."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.partition(".")
        new = MOVED.get(name) if package == "cdc_emitter" else None
        if new is None:
            return None
        warnings.warn(
            f"cdc_emitter.{name} moved to cdc_emitter.{new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.machinery.ModuleSpec(fullname, _Alias(f"cdc_emitter.{new}"))


def install() -> None:
    """Puts the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
