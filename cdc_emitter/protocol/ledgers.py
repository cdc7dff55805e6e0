"""What the reader remembers, kept small: counts by time (`SortedCounts`), what the progress
statements said (`StatementLedger`, which grows with the statements, never with the updates),
and strict mode's exact memory of the updates it reported (`ExactMemory`). Pure Python.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from typing import Any

from cdc_emitter.protocol.updates import Update

__all__ = ["NEVER", "ExactMemory", "SortedCounts", "StatementLedger"]

#: An upper bound beyond every time: "the interval never ends".
NEVER = 2**63


class SortedCounts:
    """Counts by time, sorted by time, as typed arrays (16 bytes per time) cut into chunks of at
    most ``2 * load`` times: an insert anywhere moves at most one chunk, where one pair of arrays
    would move half of everything (a reader of statements that arrive out of time order — a
    partition read after another — would move them all, again and again)."""

    def __init__(self, load: int = 1024) -> None:
        self._load = load
        self._times: list[array] = []  # the chunks, in time order, none empty
        self._counts: list[array] = []
        self._firsts: list[int] = []  # each chunk's first time
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def get(self, time: int) -> int | None:
        """The count at ``time``, or None when it has none."""
        c = bisect_right(self._firsts, time) - 1
        if c < 0 or time > self._times[-1][-1]:
            return None
        times = self._times[c]
        k = bisect_left(times, time)
        return self._counts[c][k] if k < len(times) and times[k] == time else None

    def insert(self, time: int, count: int) -> None:
        """Add ``time``, which has no count yet."""
        firsts = self._firsts
        if not firsts:
            self._times.append(array("q", [time]))
            self._counts.append(array("q", [count]))
            firsts.append(time)
            self._len = 1
            return
        times, counts = self._times[-1], self._counts[-1]
        if time > times[-1]:  # after every time: statements mostly come in time order
            times.append(time)
            counts.append(count)
            c = len(firsts) - 1
        else:
            c = max(0, bisect_right(firsts, time) - 1)
            times, counts = self._times[c], self._counts[c]
            k = bisect_left(times, time)
            times.insert(k, time)
            counts.insert(k, count)
            firsts[c] = times[0]
        self._len += 1
        if len(times) > 2 * self._load:  # split: each half a chunk of its own
            half = len(times) // 2
            self._times[c + 1 : c + 1] = [times[half:]]
            self._counts[c + 1 : c + 1] = [counts[half:]]
            firsts.insert(c + 1, times[half])
            del times[half:], counts[half:]

    def between(self, lower: int, end: int) -> list[tuple[int, int]]:
        """``(time, count)`` for every time in ``[lower, end)``, in time order."""
        found: list[tuple[int, int]] = []
        if not self._times or lower > self._times[-1][-1]:  # statements mostly come in time order
            return found
        for c in range(max(0, bisect_right(self._firsts, lower) - 1), len(self._times)):
            times, counts = self._times[c], self._counts[c]
            if times[0] >= end:
                break
            for k in range(bisect_left(times, lower), bisect_left(times, end)):
                found.append((times[k], counts[k]))
        return found


class StatementLedger:
    """What every progress statement seen so far said, merged, so each new one can be checked.

    Holds the union of the statements' intervals (merged into disjoint intervals) and the count
    of every time listed in them (non-zero counts only, `SortedCounts`). Memory: 16 bytes
    per counted time plus a few per disjoint interval: it grows with the statements (one or a
    few counted times per batch a sink writes), never with the updates.
    """

    def __init__(self) -> None:
        self._starts: list[int] = []  # disjoint covered intervals [start, end), sorted
        self._ends: list[int] = []
        self._counts = SortedCounts()  # counted times

    def __len__(self) -> int:
        return len(self._counts)

    def covers(self, time: int) -> bool:
        i = bisect_right(self._starts, time) - 1
        return i >= 0 and time < self._ends[i]

    def count(self, time: int) -> int | None:
        """The recorded count at ``time``: 0 when covered and unlisted, None when uncovered."""
        if not self.covers(time):
            return None
        return self._counts.get(time) or 0

    def record(
        self, lower: int, upper: int | None, counts: Mapping[int, int]
    ) -> list[tuple[int, int, int]]:
        """Check the statement ``[lower, upper)`` with ``counts`` (all inside it), then add it.

        Returns ``(time, recorded, stated)`` for every time of the overlap where the statement
        disagrees with what earlier statements said (an unlisted time counts 0). The first
        recorded count stays; the statement's counts at times nobody covered yet are added.
        """
        end = NEVER if upper is None else upper
        disagree = []
        fresh = []
        for time, count in counts.items():
            known = self.count(time)
            if known is None:
                if count:
                    fresh.append((time, count))
            elif known != count:
                disagree.append((time, known, count))
        for time, recorded in self._counts.between(lower, end):
            if time not in counts:
                disagree.append((time, recorded, 0))
        for time, count in fresh:
            self._counts.insert(time, count)
        self._cover(lower, end)
        disagree.sort()
        return disagree

    def _cover(self, lower: int, end: int) -> None:
        if end <= lower:
            return
        starts, ends = self._starts, self._ends
        i = bisect_left(ends, lower)  # first interval ending at or after lower: touches or overlaps
        j = bisect_right(starts, end)  # intervals starting at or before end
        if i < j:
            lower, end = min(lower, starts[i]), max(end, ends[j - 1])
        starts[i:j] = [lower]
        ends[i:j] = [end]


class ExactMemory:
    """Strict mode's exact memory of reported updates: the reader's own per-time dicts, kept.

    Costs what holding the updates costs (the reported ``Update`` objects stay alive).
    """

    def __init__(self) -> None:
        self._by_time: dict[int, dict[Any, Update]] = {}
        self._extra: dict[tuple, set[int]] = {}  # (data, time) -> diffs of late updates reported

    def remember(self, time: int, at_time: dict[Any, Update]) -> None:
        self._by_time[time] = at_time

    def check(self, data: Any, time: int, diff: int) -> int:
        """0: an exact duplicate of a remembered update; 1: same (data, time), other diff; 2: new."""
        at_time = self._by_time.get(time)
        known = None if at_time is None else at_time.get(data)
        if known is not None and known[2] == diff:
            return 0
        extra = self._extra.get((data, time))
        if extra is not None and diff in extra:
            return 0
        return 1 if known is not None or extra is not None else 2

    def add(self, data: Any, time: int, diff: int) -> None:
        self._extra.setdefault((data, time), set()).add(diff)
