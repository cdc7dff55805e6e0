"""What one batch of the sink wrote and how long each phase took (pure: no Spark, no Kafka).

Every batch ends with a `BatchResult`: in the sink's INFO log line, as
``CdcSink.last_result``, and passed to the sink's ``on_batch`` listener, so a user can chart the
sink like any Spark sink (``result.as_dict()`` is ready for JSON or a metrics library).

The phases, in order (``seconds`` holds those a batch went through, and ``total``):

``plan``
    the driver decides the interval: the topic's frontier (carried, or read from its tail), the
    sink log, the data schema against the topic's.
``check``
    one Spark job validates every row and consolidates: counts, digest, largest message
    (``encoder="jvm"``); the validation scan (``encoder="python"``).
``commit``
    the progress statement is committed as the batch's claim, before any update (a Kafka
    transaction every writer of the topic shares: `cdc_emitter.sink.claim`).
``write``
    update messages are produced and acknowledged (``jvm``: Spark's Kafka writer; ``python``:
    consolidation and production on the executors, one job).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BatchResult", "PhaseClock", "PHASES"]

PHASES = ("plan", "check", "commit", "write")


@dataclass(frozen=True)
class BatchResult:
    """What one batch wrote: its interval and how much.

    A re-run whose claim is in the topic writes its updates again and no statement (``reused``).

    Attributes:
        batch_id: the streaming micro-batch's id (None: a batch written by ``CdcSink.write``).
        lower: the interval's lower bound.
        upper: the interval's upper bound (None: the batch closed the history).
        updates: the consolidated updates written.
        messages: the Kafka messages written: update arrays and the progress statement.
        counts: the updates per time.
        reused: True for a re-run batch that found its interval recorded.
        bytes: the bytes of the messages' values.
        seconds: seconds per phase (see `PHASES`), and ``total``.
        topic: the topic written.
        encoder: the data path that wrote it (``"jvm"`` or ``"python"``).
        finished_on: where its messages were produced: ``"driver"`` (a small batch, one that
            consolidated to few updates, or a first batch whose many small messages the driver
            joined) or ``"executors"`` (Spark's Kafka writer, or the Python path's tasks).
        consolidated_on: where its rows were consolidated: ``"driver"`` (a small batch, one
            narrow Spark job) or ``"executors"`` (a Spark job with a shuffle).
    """

    batch_id: int | None
    lower: int
    upper: int | None
    updates: int
    messages: int
    counts: dict
    reused: bool  # True when the interval was found recorded (a re-run batch)
    bytes: int = 0
    seconds: Mapping[str, float] = field(default_factory=dict)  # per phase (see PHASES), and total
    topic: str | None = None
    encoder: str | None = None
    #: where the batch's messages were produced: "driver" (a small batch, one that
    #: consolidated to few updates, or a first batch whose many small messages the driver
    #: joined) or "executors" (Spark's Kafka writer)
    finished_on: str | None = None
    #: where its rows were consolidated: "driver" (a small batch, one narrow Spark job) or
    #: "executors" (a Spark job with a shuffle)
    consolidated_on: str | None = None
    #: a redundant writer's batch whose updates another writer had claimed already: written as
    #: duplicates, no statement of its own
    redundant: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The result as plain JSON values (``upper`` None: the batch closed the history)."""
        return {
            "topic": self.topic,
            "batch_id": self.batch_id,
            "lower": self.lower,
            "upper": self.upper,
            "updates": self.updates,
            "messages": self.messages,
            "bytes": self.bytes,
            "counts": {str(t): n for t, n in sorted(self.counts.items())},
            "reused": self.reused,
            "redundant": self.redundant,
            "encoder": self.encoder,
            "finished_on": self.finished_on,
            "consolidated_on": self.consolidated_on,
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
        }

    def log_text(self) -> str:
        """The stats of the INFO log line, e.g. ``updates=200 messages=2 bytes=4817 seconds:
        plan=0.004 check=0.112 write=0.083 commit=0.006 total=0.205``."""
        phases = " ".join(f"{k}={v:.3f}" for k, v in self.seconds.items())
        return f"updates={self.updates} messages={self.messages} bytes={self.bytes}" + (
            f" seconds: {phases}" if phases else ""
        )


class PhaseClock:
    """Seconds per phase of one batch: ``mark(phase)`` ends ``phase`` now (a phase marked twice
    adds up); ``seconds()`` gives the phases in `PHASES` order, then ``total``."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self._clock = clock
        self._started = self._last = clock()
        self._seconds: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r} (phases: {', '.join(PHASES)})")
        now = self._clock()
        self._seconds[phase] = self._seconds.get(phase, 0.0) + (now - self._last)
        self._last = now

    def seconds(self) -> dict[str, float]:
        out = {p: self._seconds[p] for p in PHASES if p in self._seconds}
        out["total"] = self._clock() - self._started
        return out
