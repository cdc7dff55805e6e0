"""CDCv2 updates and progress statements, and the pure functions that build them.

An update says that the multiplicity of ``data`` changes by ``diff`` at ``time``. A progress
statement says how many distinct updates each time of an interval has. Times are non-negative
integers, so a frontier is either ``(t,)`` (every time ``< t`` is complete) or ``()`` (the
history is closed).

Guarantees:
  * `consolidate` gives one update per ``(data, time)``, no zero diff, sorted by time;
  * `progress_from_counts` never builds a statement the topic could not satisfy: a count
    outside the interval, a negative count or an inverted interval raises
    `BadInputError`;
  * `split_progress` tiles a statement's interval: the parts say exactly what it says.

Data values compare with Python equality. NaN is the one value not equal to itself: decoders
hand the reader `NAN` (one shared object, equal to itself by identity) for every NaN, as
Spark's grouping treats all NaNs as one value; `canonical_nan` does it for other callers.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from cdc_emitter.errors import BadInputError

__all__ = [
    "MAX_LONG",
    "MIN_LONG",
    "NAN",
    "Progress",
    "Update",
    "Violation",
    "canonical_nan",
    "consolidate",
    "progress_for",
    "progress_from_counts",
    "split_progress",
]

MAX_LONG = 2**63 - 1
MIN_LONG = -(2**63)

#: The one NaN object decoders put into data, so that NaN == NaN inside tuples (by identity).
NAN = float("nan")


def canonical_nan(value: Any) -> Any:
    """``value`` with every NaN float (in tuples, lists, at any depth) replaced by `NAN`."""
    if value.__class__ is float:
        return NAN if value != value else value
    if isinstance(value, tuple):
        return tuple(map(canonical_nan, value))
    if isinstance(value, list):
        return list(map(canonical_nan, value))
    return value


class Update(NamedTuple):
    """One update statement: the multiplicity of ``data`` changes by ``diff`` at ``time``."""

    data: Any
    time: int
    diff: int


class Progress(NamedTuple):
    """A progress statement about the half-open interval ``lower <= t < upper``.

    ``counts`` lists ``(time, count)``: exactly ``count`` distinct ``(data, time)`` updates exist
    at that time; every unlisted time in the interval has none. ``upper == ()`` never ends.
    """

    lower: tuple[int, ...] = (0,)
    upper: tuple[int, ...] = ()
    counts: tuple[tuple[int, int], ...] = ()


class Violation(NamedTuple):
    """A protocol violation the reader saw.

    ``kind`` is one of `VIOLATION_KINDS`. ``time`` is the time it concerns, None when there is
    none. ``partition`` and ``offset`` locate the message, when the reader was told.
    """

    kind: str
    time: int | None
    detail: str
    partition: int | None = None
    offset: int | None = None

    def to_dict(self) -> dict:
        """The violation as JSON-ready fields (``partition`` and ``offset`` only when known)."""
        out: dict[str, Any] = {"kind": self.kind, "time": self.time, "detail": self.detail}
        if self.partition is not None:
            out["partition"] = self.partition
        if self.offset is not None:
            out["offset"] = self.offset
        return out


def _check_time(time: Any, what: str) -> int:
    if time is None or isinstance(time, bool) or not isinstance(time, int):
        raise BadInputError(f"{what}: time must be a non-negative integer, got {time!r}")
    if time < 0 or time > MAX_LONG:
        raise BadInputError(f"{what}: time {time} is outside 0..2^63-1")
    return time


def consolidate(updates: Iterable[Update | tuple]) -> list[Update]:
    """Sum the diffs of each ``(data, time)`` and drop zero sums.

    The output has one update per ``(data, time)`` and no zero diff. It is sorted by time;
    within a time, data keep the order in which they were first seen.

    Args:
        updates: ``Update`` values or ``(data, time, diff)`` tuples, in any order.

    Returns:
        The consolidated updates, sorted by time.

    Raises:
        BadInputError: A time is null, negative or not an integer; a diff is not an integer;
            or a sum does not fit a signed 64-bit integer.
    """
    sums: dict[tuple[Any, int], int] = {}
    for data, time, diff in updates:
        _check_time(time, f"update {data!r}")
        if diff is None or isinstance(diff, bool) or not isinstance(diff, int):
            raise BadInputError(
                f"update {data!r} at time {time}: diff must be an integer, got {diff!r}"
            )
        key = (data, time)
        sums[key] = sums.get(key, 0) + diff
    out = []
    for (data, time), diff in sums.items():
        if diff == 0:
            continue
        if not MIN_LONG <= diff <= MAX_LONG:
            raise BadInputError(
                f"update {data!r} at time {time}: consolidated diff {diff} overflows a 64-bit long"
            )
        out.append(Update(data, time, diff))
    out.sort(key=lambda u: u.time)
    return out


def progress_from_counts(lower: int, upper: int | None, counts: Mapping[int, int]) -> Progress:
    """The progress statement for the interval ``[lower, upper)``.

    Args:
        lower: The first time of the interval.
        upper: The first time after the interval, or None to close the history.
        counts: The number of distinct ``(data, time)`` updates at each time. Zero counts are
            left out of the statement.

    Returns:
        The statement, its counts sorted by time.

    Raises:
        BadInputError: The interval is inverted, a count is negative, or a counted time lies
            outside the interval. A statement the topic could not satisfy is never built.
    """
    _check_time(lower, "progress lower")
    if upper is not None:
        _check_time(upper, "progress upper")
        if upper < lower:
            raise BadInputError(f"progress interval is inverted: lower {lower} > upper {upper}")
    # checked as a whole, not count by count: a batch of event times can count a million times
    listed = tuple(item for item in sorted(counts.items()) if item[1])
    negative = next((item for item in listed if item[1] < 0), None)
    if negative is not None:
        raise BadInputError(f"progress count for time {negative[0]} is negative: {negative[1]}")
    outside = None
    if listed and listed[0][0] < lower:
        outside = listed[0][0]
    elif listed and upper is not None and listed[-1][0] >= upper:
        outside = listed[bisect_left(listed, (upper,))][0]
    if outside is not None:
        raise BadInputError(
            f"update at time {outside} lies outside the progress interval "
            f"[{lower}, {'∞' if upper is None else upper})"
        )
    return Progress((lower,), () if upper is None else (upper,), listed)


def split_progress(statement: Progress, max_times: int) -> list[Progress]:
    """``statement`` as consecutive statements that tile its interval, each counting at most
    ``max_times`` times (a statement must fit in one message): the first starts at its lower,
    each next one at the first time it counts, the last ends at its upper. A reader grafts them
    onto its frontier one after another; together they say exactly what ``statement`` says."""
    if max_times < 1:
        raise ValueError(f"max_times must be at least 1, not {max_times}")
    counts = statement.counts
    if len(counts) <= max_times:
        return [statement]
    groups = [counts[i : i + max_times] for i in range(0, len(counts), max_times)]
    starts = [statement.lower] + [(group[0][0],) for group in groups[1:]]
    ends = starts[1:] + [statement.upper]
    return [Progress(lo, hi, group) for lo, hi, group in zip(starts, ends, groups)]


def progress_for(updates: Iterable[Update], lower: int, upper: int | None) -> Progress:
    """The progress statement for ``[lower, upper)`` that covers ``updates``.

    Args:
        updates: Consolidated updates, all at times inside the interval.
        lower: The first time of the interval.
        upper: The first time after the interval, or None to close the history.

    Returns:
        The statement. Each time counts its distinct ``(data, time)`` pairs (a repeated pair
        counts once).

    Raises:
        BadInputError: As `progress_from_counts`.
    """
    seen: set[tuple[Any, int]] = set()
    counts: dict[int, int] = {}
    for data, time, _diff in updates:
        if (data, time) not in seen:
            seen.add((data, time))
            counts[time] = counts.get(time, 0) + 1
    return progress_from_counts(lower, upper, counts)
