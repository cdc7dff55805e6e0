"""Spark session settings that one write raises for its own job and puts back as the user left
them — Spark SQL's, for the sink's JVM data path (`cdc_emitter.sink.plan`).

Guarantees: a setting the session refuses, or takes and ignores, fails nothing (the write goes
a slower way to the same messages); each guard puts back only what it changed.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "FALLBACK_THRESHOLD",
    "GroupsInMemory",
    "KafkaWriteObserved",
    "V1_SOURCES",
    "first_line",
    "put_back",
]


#: Spark's setting: how many groups an object aggregation (the packing's: it collects values)
#: holds in a task before it sorts the rest of its input instead (default 128)
FALLBACK_THRESHOLD = "spark.sql.objectHashAggregate.sortBased.fallbackThreshold"


class GroupsInMemory:
    """Lets Spark's object aggregations keep more groups of a task in memory
    (`FALLBACK_THRESHOLD`) on ``spark``'s session while a batch's messages are planned
    and computed, and puts the setting back (`restore`). Packing where the rows are (or
    where the aggregation of a batch consolidated the combined way left its updates) holds a
    group per array in each such task, 520 for a first batch: past 128, Spark would sort the
    rest of the task's input, which cost more than the shuffle saved (4M rows: 4.7 s against
    3.3 s). What a task then holds is its own rows' messages, as a task packing a bucket holds
    its bucket's. The setting must be raised before the messages are cached: a cached plan is
    planned on a copy of the session's settings taken then. Batches of two sinks on one session
    at once may put it back under each other: a task then sorts, slower, to the same messages."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._current: int | None = None  # the setting in force, once read
        self._old: str | None = None  # the session's own value, None: not set
        self._raised = False

    def at_least(self, groups: int) -> None:
        """Raise the setting to ``groups`` if it is lower (0: nothing to raise). Where the
        session refuses (a platform that allows only some settings), the tasks sort instead:
        slower, the same messages."""
        if groups <= 0:
            return
        conf = self._spark.conf
        try:
            if self._current is None:
                self._old = conf.get(FALLBACK_THRESHOLD, None)
                try:
                    self._current = int(
                        self._old if self._old is not None else conf.get(FALLBACK_THRESHOLD)
                    )
                except (TypeError, ValueError):  # not a number we can compare: as the user left it
                    self._current = groups
            if groups > self._current:
                conf.set(FALLBACK_THRESHOLD, str(groups))
                self._current, self._raised = groups, True
        except Exception as exc:  # noqa: BLE001 - refused by the session: not worth failing the batch for
            log.info(
                "could not raise %s to %d (%s): Spark sorts the rows of an input task past that many "
                "groups instead",
                FALLBACK_THRESHOLD,
                groups,
                first_line(exc),
            )
            self._current = sys.maxsize  # not again for this batch

    def restore(self) -> None:
        """Put the session's own value back, if it was raised."""
        if self._raised:
            put_back(self._spark, FALLBACK_THRESHOLD, self._old)
        self._current, self._raised = None, False


def put_back(spark: Any, key: str, old: str | None) -> None:
    """Put a session setting back as the user left it: ``old``, or unset (None)."""
    if old is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, old)


def first_line(exc: BaseException) -> Any:
    """An exception's first line, short, for a log line (the exception itself when it has no text)."""
    return str(exc).splitlines()[0][:200] if str(exc) else exc


#: Spark's setting: the data sources written by their V1 writer, Kafka's among them by default
V1_SOURCES = "spark.sql.sources.useV1SourceList"


class KafkaWriteObserved:
    """Has ``spark``'s session write Kafka by its data source V2 writer while a batch is written
    in the job that packs it (`write_observed`), and puts the
    setting back (`restore`): the V1 writer, Spark's default for Kafka, runs its job
    outside the query that observes the messages, whose figures then never come
    (``Observation.get`` would wait for ever). The two writers share the producers, their
    settings and the messages written. `in_force` is False where the session refused the
    setting: the batch must then be written by two jobs
    (`DistributedPath`)."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._old: str | None = None
        self._changed = False
        self.in_force = False
        try:
            conf = spark.conf
            self._old = conf.get(V1_SOURCES, None)
            current = self._old if self._old is not None else conf.get(V1_SOURCES)
            sources = [s.strip() for s in str(current).split(",") if s.strip()]
            if "kafka" in (s.lower() for s in sources):
                conf.set(V1_SOURCES, ",".join(s for s in sources if s.lower() != "kafka"))
                self._changed = True
                # a session may take a setting and ignore it: read it back
                self.in_force = "kafka" not in str(conf.get(V1_SOURCES)).lower().split(",")
            else:
                self.in_force = True
        except Exception as exc:  # noqa: BLE001 - refused by the session: two jobs instead
            log.info(
                "could not set %s (%s): batches are written by a job after the one that packs them",
                V1_SOURCES,
                first_line(exc),
            )

    def restore(self) -> None:
        """Put the session's own value back, if it was changed."""
        if self._changed:
            put_back(self._spark, V1_SOURCES, self._old)
            self._changed = False
