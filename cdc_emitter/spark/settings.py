"""The Spark SQL session setting that the sink's JVM data path (`cdc_emitter.sink.plan`) raises
while a batch's messages are computed, and puts back as the user left it (`GroupsInMemory`).

Guarantees: a setting the session refuses, or takes and ignores, fails nothing (the batch goes
a slower way to the same messages); the guard puts back only what it changed.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "FALLBACK_THRESHOLD",
    "GroupsInMemory",
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
