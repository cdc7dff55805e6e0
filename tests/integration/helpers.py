"""Helpers for integration tests: read a CDC topic back through the codec and the reader; see
what Spark logs."""

from __future__ import annotations

import uuid
from typing import Any

from cdc_emitter.errors import DecodeError
from cdc_emitter.kafka.reading import read_topic
from cdc_emitter.protocol import CdcReader, Update, consolidate

#: Spark settings for a test's Delta session: Delta rebuilds a table's state in 50 partitions by
#: default, which for a table of a few rows on two cores is most of each command's time (the
#: converter's job took 172 s with them, 82 s with 2).
DELTA_TEST_CONF = {"spark.databricks.delta.snapshotPartitions": "2"}
#: The same as ``--conf`` options of the command line.
DELTA_TEST_ARGS = [
    arg for key, value in DELTA_TEST_CONF.items() for arg in ("--conf", f"{key}={value}")
]


def delta_package_or_skip() -> str:
    """The Delta Lake package built for this PySpark, else the test skipped: Delta publishes builds
    for some Spark releases only (none for 4.3 when this was written), so a run of the suite on a
    newer PySpark (``CDC_PYSPARK=...``) says so instead of failing on a package that does not exist."""
    import pyspark
    import pytest

    from cdc_emitter.spark.session import delta_package

    package = delta_package(pyspark.__version__)
    if package is None:
        pytest.skip(
            f"Delta Lake has no build for Spark {pyspark.__version__} (cdc_emitter.spark.session.DELTA_PACKAGES)"
        )
    return package


def read_history(bootstrap: str, topic: str, codec: Any, *, start: int = 0, timeout: float = 60.0):
    """Read every message of ``topic`` and reconstruct its history.

    Returns ``(updates, frontier, violations, reader)``: the consolidated updates the reader
    reported (sorted by time, then data repr, for stable comparisons), its frontier, its
    violations (undecodable messages included) and the reader itself (for counters).
    """
    reader = CdcReader(start)
    finished: list[Update] = []
    for record in read_topic(bootstrap, topic, timeout=timeout):
        try:
            message = codec.decode(record.value)
        except DecodeError as exc:
            reader.violate("undecodable", None, str(exc), record.partition, record.offset)
            continue
        for updates, _frontier in reader.push(
            message, partition=record.partition, offset=record.offset
        ):
            finished.extend(updates)
    history = sorted(consolidate(finished), key=lambda u: (u.time, repr(u.data), u.diff))
    return history, reader.frontier, list(reader.violations), reader


def as_history(triples) -> list[Update]:
    """Expected history from ``(data, time, diff)`` triples, consolidated and sorted like read_history."""
    return sorted(
        consolidate(Update(*t) for t in triples), key=lambda u: (u.time, repr(u.data), u.diff)
    )


def count_messages(bootstrap: str, topic: str) -> int:
    """How many messages the topic holds (sum of high - low watermarks)."""
    from cdc_emitter.kafka.reading import end_offsets

    return sum(high - low for low, high in end_offsets(bootstrap, topic).values())


class JvmLog:
    """What Spark's loggers under ``name`` log at WARN and above while in use, through a log4j2
    appender of the driver's JVM (where local executors log too), whatever the session's level."""

    def __init__(self, spark, name: str) -> None:
        self._jvm, self._name = spark._jvm, name

    def __enter__(self) -> JvmLog:
        log4j = self._jvm.org.apache.logging.log4j
        self._context = log4j.LogManager.getContext(False)
        self._text = self._jvm.java.io.StringWriter()
        layout = log4j.core.layout.PatternLayout.newBuilder().withPattern("%p %c{1}: %m%n").build()
        self._appender = log4j.core.appender.WriterAppender.createAppender(
            layout, None, self._text, "cdc-test-" + uuid.uuid4().hex[:8], False, True
        )
        self._appender.start()
        self._level = self._context.getLogger(self._name).getLevel()  # the level in force before
        log4j.core.config.Configurator.setLevel(self._name, log4j.Level.WARN)
        self._context.getLogger(self._name).addAppender(self._appender)
        return self

    def text(self) -> str:
        return self._text.toString()

    def clear(self) -> None:
        self._text.getBuffer().setLength(0)

    def __exit__(self, *exc: Any) -> None:
        log4j = self._jvm.org.apache.logging.log4j
        self._context.getLogger(self._name).removeAppender(self._appender)
        self._appender.stop()
        log4j.core.config.Configurator.setLevel(self._name, self._level)
