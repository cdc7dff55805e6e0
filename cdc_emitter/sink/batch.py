"""The seam between `CdcSink` and the paths that write a batch (pure).

The sink decides a batch's interval and names it (`Batch`); a path —
`cdc_emitter.sink.distributed` (Spark's Kafka writer), `cdc_emitter.sink.driver`
(finished on the driver), `cdc_emitter.sink.python_path` (our encoders on the executors) —
checks every row of it and returns a `Checked` batch, of which nothing is written yet.
The sink then compares a re-run's digest, commits the batch's progress statement as its claim,
records the interval, and only then calls `Checked.write`.

Guarantees a path gives: `Checked.write` is the only step that writes to Kafka, and it
returns only once every message it wrote is acknowledged; a bad row, an overflowing diff sum or
an oversized update raises before a path returns its `Checked` batch (the Python path: before
`Checked.write` writes its first message); `Checked.digest` gives the counts per time and the
digest before anything is written, for the batch's claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from cdc_emitter.sink.interval import Recorded

__all__ = ["Batch", "Checked", "Known", "Written"]


@dataclass(frozen=True)
class Batch:
    """One batch as the sink decided it before any Spark work."""

    what: str  # how messages name it: the topic and the batch id
    batch_id: int | None
    writer: str
    schema: Any  # the input's Spark schema, collations taken off
    data_cols: list[str]
    diff_col: str | None  # None: every row counts +1
    avro_data: dict  # the Avro data record
    codec: Any  # the topic's CdcCodec (framing, schema id, limit)
    lower: int
    recorded: Recorded | None  # a re-run's first decision
    time: int | None  # every update's time (the default time mode); None: the rows carry theirs
    headers: list  # update messages' Kafka headers
    update_partitions: list | None  # where update messages go (None: the producer's choice)
    #: ``recorded`` came from the sink log; a re-run that found its claim in the topic instead
    #: records it there (see `cdc_emitter.sink.commit.record_later`)
    logged: bool = False
    #: the earliest time a row may carry (column mode; None: ``lower``): 0 for a redundant
    #: writer, whose earlier times are compared with the statements already there (`sink.claim`)
    earliest: int | None = None

    @property
    def late_below(self) -> int:
        """A row's time below this is late."""
        return self.lower if self.earliest is None else self.earliest


class Written(NamedTuple):
    """What `Checked.write` wrote: updates per time, their digest XOR, messages, bytes."""

    counts: dict
    digest: int
    messages: int
    bytes: int


class Checked:
    """A batch whose every row passed the checks, ready to write: nothing is written yet.

    ``max_time``: the largest time among its rows, cancelled updates included (None: no rows);
    ``rows``, ``groups`` and ``bytes``: its input rows, their distinct data and times, and the
    bytes of its messages, as far as the path knows them before writing (0 where it does not) —
    what the next batch's path follows."""

    max_time: int | None = None
    rows: int = 0
    groups: int = 0
    bytes: int = 0
    #: its messages are produced by the sink's driver producer, though packed on the executors
    produced_on_driver: bool = False

    def digest(self) -> tuple[int, tuple]:
        """``(xor, ((time, updates), ...))`` of what `write` would write: for a re-run to
        compare with its first attempt's before writing anything."""
        raise NotImplementedError

    def write(self) -> Written:
        """Write the batch's update messages; return once every one is acknowledged."""
        raise NotImplementedError

    def release(self) -> None:
        """Free what the check kept for the write (cached messages); called once, at the end."""


class Known(Checked):
    """A batch whose messages are known before they are written (counts and digest included)."""

    def __init__(
        self,
        *,
        counts: dict,
        digest: int,
        max_time: int | None,
        rows: int,
        groups: int,
        messages: int,
        n_bytes: int,
        write: Callable[[], None],
        release: Callable[[], None] | None = None,
        produced_on_driver: bool = False,
    ) -> None:
        self.counts, self._xor, self.max_time = counts, digest, max_time
        self.rows, self.groups, self.messages, self.bytes = rows, groups, messages, n_bytes
        self.produced_on_driver = produced_on_driver
        self._write, self._release = write, release

    def digest(self) -> tuple[int, tuple]:
        return self._xor, tuple(sorted(self.counts.items()))

    def write(self) -> Written:
        if self.messages:
            self._write()
        return Written(self.counts, self._xor, self.messages, self.bytes)

    def release(self) -> None:
        if self._release is not None:
            self._release()
