"""The CDCv2 reader: the exact, ordered history from duplicated, reordered, re-batched messages.

Pure Python: no Kafka, no Spark, no Avro.

The reader follows differential dataflow's ``capture`` reader (see the CDCv2 write-up): it
deduplicates updates, queues progress statements until they join the progress frontier without
a gap, and reports a time only once both the progress chain covers it and every update its
count announces has arrived. Beyond that it *reports* protocol violations instead of raising
or stalling: every progress statement is checked against every earlier one (a small ledger of
what the statements said, which grows with the statements, never with the updates), and a strict
mode remembers what it reported, so a late update that is not an exact duplicate is caught too.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from functools import partial
from operator import itemgetter
from typing import Any, Literal, NamedTuple

from cdc_emitter.protocol.headers import HEADER_BATCH, HEADER_WRITER
from cdc_emitter.protocol.ledgers import ExactMemory, SortedCounts, StatementLedger
from cdc_emitter.protocol.updates import Progress, Update, Violation

__all__ = [
    "STRICT_MODES",
    "VIOLATION_KINDS",
    "CdcReader",
    "CountingReader",
    "Pending",
    "Strict",
    "TimeCounts",
    "Waiting",
    # in protocol.ledgers; imported from here too
    "ExactMemory",
    "SortedCounts",
    "StatementLedger",
]

_DATA, _TIME, _DIFF = itemgetter(0), itemgetter(1), itemgetter(2)
#: An Update from a held ``(data, time, diff)`` tuple (in C, as `map` calls it)
_as_update = partial(tuple.__new__, Update)


class Waiting(NamedTuple):
    """A progress statement whose counted updates are not all there: a time it counts is below
    the progress frontier, and fewer distinct updates arrived at it than the statement counts
    (its writer died after its claim, or is still writing). The reader waits on those times.

    ``writer`` and ``batch`` are the statement's ``cdc-emitter-writer`` and ``cdc-emitter-batch``
    headers (`cdc_emitter.protocol.headers`), when the caller passed them; ``times`` lists
    the first 20 waiting times (``open_times`` says how many there are); ``missing`` of
    ``counted`` updates at those times have not arrived."""

    writer: str | None
    batch: str | None
    lower: int
    upper: int | None  # None: the statement closes the history
    times: tuple[int, ...]
    open_times: int
    missing: int
    counted: int
    partition: int | None
    offset: int | None

    def to_dict(self) -> dict:
        return {
            "writer": self.writer,
            "batch": self.batch,
            "lower": [self.lower],
            "upper": [] if self.upper is None else [self.upper],
            "times": list(self.times),
            "open_times": self.open_times,
            "missing": self.missing,
            "counted": self.counted,
            "partition": self.partition,
            "offset": self.offset,
        }


class Pending(NamedTuple):
    """What keeps a reader's frontier where it is (see `CdcReader.pending`)."""

    updates: int  # distinct updates held beyond the frontier
    times: tuple[int, ...]  # the times those updates are at (sorted; at most 20 listed)
    stalled: tuple[
        tuple[int, int, int], ...
    ]  # (time, announced count, distinct received) < progress
    progress: tuple[int, ...]  # how far the gapless chain of progress statements reaches
    gap: tuple[int, int] | None  # statements wait beyond a missing interval [a, b)
    statements: int  # well-formed progress statements received
    waiting: tuple[Waiting, ...] = ()  # the statements of the stalled times, by their first time

    @property
    def empty(self) -> bool:
        return not self.updates and not self.stalled and self.gap is None

    def to_dict(self) -> dict:
        return {
            "updates": self.updates,
            "times": list(self.times),
            "stalled": [{"time": t, "count": c, "received": r} for t, c, r in self.stalled],
            "progress": list(self.progress),
            "gap": None if self.gap is None else list(self.gap),
            "statements": self.statements,
            "waiting": [w.to_dict() for w in self.waiting],
        }


VIOLATION_KINDS = (
    "conflicting_diff",  # two different diffs for one (data, time)
    "over_count",  # more distinct updates at a time than its announced count
    "count_mismatch",  # two progress statements disagree on the count of a time
    "count_outside_interval",  # a progress count for a time outside [lower, upper)
    "negative_time",  # an update or a count at a time < 0
    "negative_count",  # a progress count < 0
    "zero_diff",  # an update whose diff is 0
    "malformed_progress",  # lower/upper not a single time (or upper empty), or lower > upper
    "malformed_update",  # an update whose time or diff is not an integer
    "undecodable",  # a message that could not be decoded (reported by the consumer)
)


#: What a strict reader remembers of the updates it reported (see `CdcReader`).
Strict = Literal["exact", "bloom"]
STRICT_MODES: tuple[Strict, ...] = ("exact", "bloom")


def _single(bound: Any) -> int | None:
    """The time of a one-element bound, or None if it is not one non-negative integer."""
    if isinstance(bound, (list, tuple)) and len(bound) == 1:
        (t,) = bound
        if isinstance(t, int) and not isinstance(t, bool) and t >= 0:
            return t
    return None


#: Where a statement came from: ``(writer, batch, lower, upper, partition, offset)``.
Origin = tuple[str | None, str | None, int, int | None, int | None, int | None]


def _arrival(entry: tuple[int, int, Progress, Origin]) -> int:
    """A queued statement's place in the order of arrival (see ``CdcReader._graft_progress``)."""
    return entry[1]


def _header_text(headers: Any, key: str) -> str | None:
    """The value of header ``key`` as text (bytes decoded as UTF-8), or None when absent.
    ``headers``: ``(key, value)`` pairs as Kafka gives them, or a mapping."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs:
        if name == key:
            if value is None:
                return None
            if isinstance(value, (bytes, bytearray, memoryview)):
                return bytes(value).decode("utf-8", "replace")
            return str(value)
    return None


class CdcReader:
    """Recovers the exact, ordered history from duplicated, reordered, re-batched CDCv2 messages.

    The protocol, as the reader sees it:

    * an update message holds ``(data, time, diff)`` updates; one ``(data, time)`` may arrive
      many times, in any message, in any order;
    * a progress statement (`Progress`) says how many distinct updates each time of the
      interval ``[lower, upper)`` has; statements may also repeat and arrive in any order;
    * a time is complete once the progress statements cover it without a gap from the start
      frontier and as many distinct updates as its count have arrived.

    `push` takes one message and returns the updates it finished: every update at a time below
    the new `frontier`, consolidated, each exactly once over the reader's life. A progress
    statement may come with its message headers (plain ``(key, value)`` pairs): `pending`
    then names the writer and batch of each statement whose counted updates are not all there.

    Invariants:

    * `frontier` only moves forward, and only over times the progress chain proves complete;
    * a time is reported once, with all its distinct updates; duplicates (same data, time and
      diff) are dropped;
    * every progress statement is checked against every earlier one, whenever it arrives (also
      after the times it speaks of were reported). A disagreement on a count is a
      ``count_mismatch``; the count used is that of the statement grafted first;
    * bad input never raises: each problem is appended to `violations` and the reader goes on
      (an over-counted time is still reported, with all its distinct updates);
    * memory: the state beyond the frontier, plus a ledger of the statements (16 bytes per
      counted time). By default nothing is kept of reported updates, so a late update at a
      reported time looks like a duplicate.

    Strict mode remembers the reported updates, so a late update that is not an exact duplicate
    is a violation: an ``over_count`` (new data at that time) or a ``conflicting_diff`` (same
    data, other diff). ``strict="exact"`` keeps every reported update. ``strict="bloom"`` keeps
    a Bloom filter of them (about 3.4 MiB per million updates at ``bloom_error_rate=0.001``):
    it never reports a false violation, and misses a late non-duplicate with probability at most
    ``bloom_error_rate``.

    Args:
        start: The frontier the history starts at: times below it are taken as reported.
        strict: None, ``"exact"`` or ``"bloom"``: what is remembered of reported updates.
        bloom_error_rate: The Bloom filter's false-positive rate, for ``strict="bloom"``.
        report_updates: False for a caller that wants the verdicts and the frontier only:
            `push` then hands out no updates (each pair's list is empty), which saves making
            an `Update` of each. Everything else is decided as with True.

    Raises:
        ValueError: ``strict`` is not one of `STRICT_MODES`.

    Attributes:
        violations: Every violation seen, in the order found.
        messages: Messages pushed (undecodable ones included when the caller counts them).
        updates_received: Updates received, duplicates and malformed ones included.
        duplicates: Updates dropped as exact duplicates.
        strict: The strict mode, or None.
    """

    def __init__(
        self,
        start: int = 0,
        *,
        strict: Strict | None = None,
        bloom_error_rate: float = 0.001,
        report_updates: bool = True,
    ):
        if strict is not None and strict not in STRICT_MODES:
            raise ValueError(
                f"strict must be None or one of {', '.join(STRICT_MODES)}, got {strict!r}"
            )
        self._start = start
        self._reported: int | None = start  # None: closed
        self._progress: int | None = start  # frontier of grafted progress; None: closed
        # time -> data -> the update as it arrived, an Update or a plain (data, time, diff)
        # tuple (times >= reported); reporting a time makes each an Update, in C
        # (a CountingReader holds the number of distinct updates instead of the dict)
        self._pending: dict[int, Any] = {}
        self._held = 0  # distinct updates in _pending
        self._times: list[int] = []  # heap of every time that holds state in the dicts here
        self._outstanding: dict[int, int] = {}  # time -> announced count - distinct received
        self._blocking: list[int] = []  # heap of times whose outstanding may be > 0
        self._announced: dict[int, int] = {}  # grafted counts for times in [reported, progress)
        # time -> the Origin of the statement that announced it, while its count is not met
        self._origins: dict[int, Origin] = {}
        # statements not yet graftable (lower > progress): a heap of (lower, arrival, statement,
        # origin), so that a message costs nothing for the statements still waiting
        self._queue: list[tuple[int, int, Progress, Origin]] = []
        self._arrivals = 0  # statements queued so far: their order of arrival
        self._ledger = StatementLedger()
        self._statements = 0
        if strict == "bloom":
            from cdc_emitter.protocol.bloom import BloomMemory

            self._memory: Any = BloomMemory(bloom_error_rate)
        else:
            self._memory = ExactMemory() if strict == "exact" else None
        self.strict = strict
        self._report_updates = report_updates
        self.violations: list[Violation] = []
        self.messages = 0
        self.updates_received = 0
        self.duplicates = 0

    # -- public ---------------------------------------------------------------------------

    @property
    def frontier(self) -> tuple[int, ...]:
        """How far the history is reported.

        ``(t,)``: every time below ``t`` is reported. ``()``: the history is closed and complete.
        """
        return () if self._reported is None else (self._reported,)

    def retained(self) -> int:
        """How many items of state the reader holds.

        Returns:
            The updates, counts and queued statements held, one item each.
        """
        return (
            sum(len(v) for v in self._pending.values())
            + len(self._outstanding)
            + len(self._announced)
            + len(self._origins)
            + len(self._blocking)
            + len(self._times)
            + len(self._queue)
        )

    @property
    def held(self) -> int:
        """Distinct updates held beyond the frontier, waiting for progress or for their count."""
        return self._held

    def pending(self) -> Pending:
        """What keeps the frontier where it is.

        Costs a pass over the open times, not over the updates.

        Returns:
            The held updates, the stalled counts, the statements they wait on and any gap in
            the progress chain. ``Pending.empty`` is true when nothing received is waiting:
            every update is reported and every statement grafted.
        """
        progress = self._progress
        stalled = tuple(
            sorted(
                (t, self._announced.get(t, 0), self._announced.get(t, 0) - left)
                for t, left in self._outstanding.items()
                if left > 0 and (progress is None or t < progress)
            )
        )
        by_statement: dict[Origin, list[tuple[int, int, int]]] = {}
        for time, count, received in stalled:
            origin = self._origins.get(time)
            if origin is not None:
                by_statement.setdefault(origin, []).append((time, count, received))
        waiting = tuple(
            Waiting(
                writer,
                batch,
                lower,
                upper,
                tuple(t for t, _c, _r in times[:20]),
                len(times),
                sum(c - r for _t, c, r in times),
                sum(c for _t, c, _r in times),
                partition,
                offset,
            )
            for (writer, batch, lower, upper, partition, offset), times in sorted(
                by_statement.items(), key=lambda entry: entry[1][0][0]
            )
        )
        gap = None
        if self._queue and progress is not None:
            gap = (progress, self._queue[0][0])
        times = sorted(t for t, at_time in self._pending.items() if at_time)
        return Pending(
            updates=self._held,
            times=tuple(times[:20]),
            stalled=stalled,
            progress=() if progress is None else (progress,),
            gap=gap,
            statements=self._statements,
            waiting=waiting,
        )

    def violate(
        self,
        kind: str,
        time: int | None,
        detail: str,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        """Record a violation. Consumers use it for undecodable messages too.

        Args:
            kind: One of `VIOLATION_KINDS`.
            time: The time it concerns, or None.
            detail: What is wrong, in a sentence.
            partition: The partition of the message, when known.
            offset: The offset of the message, when known.
        """
        self.violations.append(Violation(kind, time, detail, partition, offset))

    def push(
        self,
        message: Progress | Iterable[Update],
        *,
        partition: int | None = None,
        offset: int | None = None,
        headers: Any = None,
    ) -> list[tuple[list[Update], tuple[int, ...]]]:
        """Feed one message to the reader.

        Args:
            message: A list of updates, or a progress statement.
            partition: Where the message was read, named in the violations it causes.
            offset: The message's offset in ``partition``, named likewise.
            headers: A progress statement's message headers, as ``(key, value)`` pairs (bytes or
                text values) or a mapping: its writer and batch, which `pending` names while
                its counts are not met. Ignored for updates.

        Returns:
            The ``(updates, frontier)`` pairs this message finished: every update at a time
            below ``frontier``, consolidated, each once over the reader's life. Usually zero or
            one pair.
        """
        self.messages += 1
        where = {"partition": partition, "offset": offset}
        if isinstance(message, Progress):
            self._receive_progress(message, where, headers)
        else:
            self._receive_updates(message, where)
        self._graft_progress(where)
        return self._advance()

    # -- updates --------------------------------------------------------------------------

    def _receive_updates(self, updates: Iterable[Update], where: dict) -> None:
        if updates.__class__ is list and self._receive_new_at_one_time(updates, where):
            return
        reported = self._reported
        pending = self._pending
        memory, start = self._memory, self._start
        received = duplicates = 0
        at_time: dict[Any, Update] = {}
        at_time_of = -1  # the time whose dict `at_time` is (none yet): batches are mostly one time
        fresh = 0  # distinct new updates in the current run of `at_time_of`, settled per run
        new = tuple.__new__
        for update in updates:
            received += 1
            data, time, diff = update
            if time.__class__ is not int or diff.__class__ is not int or time < 0 or diff == 0:
                self._bad_update(data, time, diff, where)
                continue
            if reported is None or time < reported:
                # time already reported: a duplicate, or (strict) checked against what was
                if memory is None or time < start or self._late(data, time, diff, where):
                    duplicates += 1
                continue
            if time != at_time_of:
                if fresh:
                    self._settle(at_time_of, fresh, where)
                    fresh = 0
                found = pending.get(time)
                if found is None:
                    self._track(time)
                    found = pending[time] = {}
                at_time, at_time_of = found, time
            known = at_time.get(data)
            if known is not None:
                if known[2] == diff:
                    duplicates += 1
                else:
                    self.violate(
                        "conflicting_diff",
                        time,
                        f"data {data!r} at time {time} has diffs {known[2]} and {diff}",
                        **where,
                    )
                continue
            at_time[data] = (
                update
                if update.__class__ is tuple or update.__class__ is Update
                else new(Update, (data, time, diff))
            )
            fresh += 1
        if fresh:
            self._settle(at_time_of, fresh, where)
        self.updates_received += received
        self.duplicates += duplicates

    def _receive_new_at_one_time(self, updates: list, where: dict) -> bool:
        """The usual message, taken whole: every update at one open time, each new there.

        Hashing and inserting happen in C (a set, `dict.update`), not update by update. Returns
        False, having changed nothing, for any other message (several times, a reported time,
        a malformed update, a duplicate or conflict): the update-by-update loop takes those.
        """
        try:
            if set(map(len, updates)) != {3}:
                return False
            times = set(map(_TIME, updates))
            if len(times) != 1:
                return False
            (time,) = times
            reported = self._reported
            if time.__class__ is not int or time < 0 or reported is None or time < reported:
                return False
            diffs = set(map(_DIFF, updates))
            if 0 in diffs or any(d.__class__ is not int for d in diffs):
                return False
            datas = list(map(_DATA, updates))
            at_time = self._pending.get(time)
            if at_time and not at_time.keys().isdisjoint(datas):
                return False
        except TypeError:  # unhashable data, an update that is no sequence: the loop says so
            return False
        if at_time is None:
            self._track(time)
            at_time = self._pending[time] = {}
        before = len(at_time)
        at_time.update(zip(datas, updates))
        fresh = len(at_time) - before
        if fresh != len(updates):  # duplicates within the message: undo, the loop decides
            for data in datas:
                at_time.pop(data, None)
            return False
        self.updates_received += fresh
        self._settle(time, fresh, where)
        return True

    def _settle(self, time: int, fresh: int, where: dict) -> None:
        """Count ``fresh`` new distinct updates at ``time`` against its announced count.

        One over_count violation per update beyond a grafted count, as if counted one by one.
        """
        self._held += fresh
        before = self._outstanding.get(time, 0)
        left = self._outstanding[time] = before - fresh
        progress = self._progress
        if left < 0 and (progress is None or time < progress):
            for _ in range(min(fresh, -left)):
                self.violate(
                    "over_count",
                    time,
                    f"time {time} has more distinct updates than its count "
                    f"{self._announced.get(time, 0)}",
                    **where,
                )

    def _late(self, data: Any, time: int, diff: int, where: dict) -> bool:
        """Strict mode: an update at a reported time. True when it duplicates a reported one."""
        seen = self._memory.check(data, time, diff)
        if seen == 0:
            return True
        self._memory.add(data, time, diff)
        if seen == 1:
            self.violate(
                "conflicting_diff",
                time,
                f"data {data!r} at time {time} arrived with diff {diff} after the time was "
                "reported with another diff",
                **where,
            )
        else:
            self.violate("over_count", time, self.late_detail(data, time, diff), **where)
        return False

    def late_detail(self, data: Any, time: int, diff: int) -> str:
        """The detail of the ``over_count`` of ``data`` arriving at a reported time (strict mode).

        Args:
            data: The update's data.
            time: The reported time it arrived at.
            diff: The update's diff.

        Returns:
            The sentence the violation carries.
        """
        count = self._ledger.count(time)
        return (
            f"data {data!r} at time {time} (diff {diff}) arrived after the time was reported "
            f"complete with count {count or 0}, and is no duplicate of a reported update"
        )

    def _bad_update(self, data: Any, time: Any, diff: Any, where: dict) -> None:
        if (
            not isinstance(time, int)
            or isinstance(time, bool)
            or not isinstance(diff, int)
            or isinstance(diff, bool)
        ):
            self.violate(
                "malformed_update", None, f"update {data!r}: time {time!r}, diff {diff!r}", **where
            )
        elif time < 0:
            self.violate("negative_time", time, f"update {data!r} at negative time {time}", **where)
        else:
            self.violate("zero_diff", time, f"update {data!r} at time {time} has diff 0", **where)

    # -- progress -------------------------------------------------------------------------

    def _receive_progress(self, p: Progress, where: dict, headers: Any = None) -> None:
        lower = _single(p.lower)
        upper = _single(p.upper)
        if (
            lower is None
            or (upper is None and len(p.upper) != 0)
            or (upper is not None and upper < lower)
        ):
            self.violate(
                "malformed_progress",
                None,
                f"progress lower {list(p.lower)} upper {list(p.upper)}",
                **where,
            )
            return
        good: dict[int, int] = {}
        for time, count in p.counts:
            if time in good and good[time] != count:
                self.violate(
                    "count_mismatch",
                    time,
                    f"one progress statement lists time {time} with counts {good[time]} and {count}",
                    **where,
                )
            elif time < 0:
                self.violate(
                    "negative_time", time, f"progress counts negative time {time}", **where
                )
            elif count < 0:
                self.violate(
                    "negative_count", time, f"progress count {count} for time {time}", **where
                )
            elif time < lower or (upper is not None and time >= upper):
                self.violate(
                    "count_outside_interval",
                    time,
                    f"count for time {time} outside interval [{lower}, {'∞' if upper is None else upper})",
                    **where,
                )
            else:
                good[time] = count
        self._statements += 1
        for time, recorded, stated in self._ledger.record(lower, upper, good):
            self.violate(
                "count_mismatch",
                time,
                f"progress statements disagree on the count at time {time}: {recorded} and "
                f"{stated} (this statement: [{lower}, {'∞' if upper is None else upper}))",
                **where,
            )
        upper_bound = () if upper is None else (upper,)
        statement = Progress((lower,), upper_bound, tuple(good.items()))
        origin = (
            _header_text(headers, HEADER_WRITER),
            _header_text(headers, HEADER_BATCH),
            lower,
            upper,
            where["partition"],
            where["offset"],
        )
        heapq.heappush(self._queue, (lower, self._arrivals, statement, origin))
        self._arrivals += 1

    def _graft_progress(self, where: dict) -> None:
        """Incorporate every queued statement whose lower the progress frontier has reached: in
        rounds, each grafting every statement whose lower the frontier had reached when the round
        began, in their order of arrival (where they disagree, the count grafted first is used).

        Each statement leaves the heap once, so a reader of many statements that arrive ahead of
        the frontier (a partition read ahead of the others) costs O(n log n), not a scan of every
        waiting statement per message."""
        queue = self._queue
        while queue:
            progress = self._progress  # None: closed, so every statement grafts (and is checked)
            if progress is not None and queue[0][0] > progress:
                return
            if len(queue) == 1:  # the usual case: the statement just received, graftable
                _lower, _arrival_index, p, origin = queue.pop()
                self._graft(p, origin, where)
                continue
            ready = []
            while queue and (progress is None or queue[0][0] <= progress):
                ready.append(heapq.heappop(queue))
            ready.sort(key=_arrival)
            for _lower, _arrival_index, p, origin in ready:
                self._graft(p, origin, where)

    def _graft(self, p: Progress, origin: Origin, where: dict) -> None:
        progress = self._progress
        upper = p.upper[0] if p.upper else None
        listed = dict(p.counts)
        if progress is None:
            return
        for time, count in listed.items():
            if time < progress:
                continue
            self._track(time)
            self._announced[time] = count
            left = self._outstanding.get(time, 0) + count
            self._outstanding[time] = left
            if left > 0:
                heapq.heappush(self._blocking, time)
                self._origins[time] = origin
            elif left < 0:
                self.violate(
                    "over_count",
                    time,
                    f"time {time} has {count - left} distinct updates but a count of {count}",
                    **where,
                )
        if upper is None or upper > progress:
            self._progress = upper

    def _track(self, time: int) -> None:
        """Remember that ``time`` holds state, so reporting it can drop that state."""
        if (
            time not in self._outstanding
            and time not in self._pending
            and time not in self._announced
        ):
            heapq.heappush(self._times, time)

    # -- reporting ------------------------------------------------------------------------

    def _advance(self) -> list[tuple[list[Update], tuple[int, ...]]]:
        blocking = self._blocking
        while blocking and self._outstanding.get(blocking[0], 0) <= 0:
            heapq.heappop(blocking)
        frontier = self._progress
        if blocking and (frontier is None or blocking[0] < frontier):
            frontier = blocking[0]
        if frontier == self._reported:
            return []
        finished: list[Update] = []
        times = self._times
        while times and (frontier is None or times[0] < frontier):
            time = heapq.heappop(times)
            self._outstanding.pop(time, None)
            self._announced.pop(time, None)
            self._origins.pop(time, None)
            self._release(time, finished)
        self._reported = frontier
        return [(finished, self.frontier)]

    def _release(self, time: int, finished: list[Update]) -> None:
        """Hand out the updates held at ``time``, now reported."""
        at_time = self._pending.pop(time, None)
        if at_time:
            if self._report_updates:
                # held as they arrived: Update objects, or plain (data, time, diff) tuples
                finished.extend(map(_as_update, at_time.values()))
            self._held -= len(at_time)
            if self._memory is not None:
                self._memory.remember(time, at_time)


class TimeCounts(NamedTuple):
    """What one message holds at one time, as `CountingReader` takes it.

    ``fresh``: updates whose ``(data, time)`` arrives here first (in the reading order);
    ``conflicts``: ``(data, first_diff, diff)`` for each later arrival of a ``(data, time)``
    with another diff than its first, in message order. Later arrivals with the first diff are
    duplicates, counted once for the whole read (`CountingReader.add_duplicates`): where
    they arrive changes nothing.
    """

    time: int
    fresh: int
    conflicts: tuple[tuple[Any, int, int], ...] = ()


class CountingReader(CdcReader):
    """The `CdcReader`'s verdicts from counts, for a caller that deduplicates elsewhere.

    A distributed reader (Spark) finds, for every ``(data, time)``, its first arrival in the
    reading order and every later arrival with another diff. This reader takes those counts
    message by message (`push_counts`; progress statements through `push`) and makes every
    decision a `CdcReader` makes reading the same messages in the same order. After every
    message it has the same frontier, violations (kinds, times, details, partitions, offsets),
    duplicates and pending state.

    It holds counts per open time, never updates, so it reports no updates. The caller takes
    the history from its own data, less `late`: first arrivals at times already reported,
    which a `CdcReader` drops.

    Strict mode is decided exactly, as ``strict="exact"``, with no memory of reported updates.
    A first arrival at a reported time is an ``over_count`` whose detail names the data, which
    only the caller has. Those violations get an empty detail and are listed in
    `late_violations`, for the caller to fill in with `late_detail`.

    Within one message, violations are listed time by time, and at a reported time the new rows
    come before the other diffs. A `CdcReader` lists them as they arrive: the same violations,
    in another order only for a message that mixes them.

    Args:
        start: The frontier the history starts at.
        strict: None or ``"exact"``/``"bloom"`` (both decided exactly).

    Raises:
        ValueError: ``strict`` is not one of `STRICT_MODES`.

    Attributes:
        late: ``(partition, offset, time)`` of each message with first arrivals at a time
            already reported.
        late_violations: In strict mode, ``(index in violations, count)`` of those arrivals'
            ``over_count`` violations, whose details the caller fills in.
    """

    def __init__(self, start: int = 0, *, strict: Strict | None = None):
        if strict is not None and strict not in STRICT_MODES:
            raise ValueError(
                f"strict must be None or one of {', '.join(STRICT_MODES)}, got {strict!r}"
            )
        super().__init__(start)
        self.strict = strict
        self._late_diffs: dict[tuple[Any, int], set[int]] = {}  # strict: late conflicting diffs
        #: ``(partition, offset, time)`` of first arrivals at a time already reported
        self.late: list[tuple[Any, Any, int]] = []
        #: strict: ``(index in violations, count)`` of late first arrivals' over_counts
        self.late_violations: list[tuple[int, int]] = []

    def retained(self) -> int:
        """How many items of state the reader holds (counts per time, queued statements)."""
        return (
            sum(self._pending.values())
            + len(self._outstanding)
            + len(self._announced)
            + len(self._origins)
            + len(self._blocking)
            + len(self._times)
            + len(self._queue)
        )

    def add_duplicates(self, n: int) -> None:
        """Count later arrivals with their first diff, wherever they arrived.

        Args:
            n: How many such arrivals the whole read holds.
        """
        self.duplicates += n

    def push_counts(
        self,
        items: Iterable[TimeCounts | Update],
        *,
        received: int = 0,
        partition: Any = None,
        offset: Any = None,
    ) -> None:
        """Feed one update message, as counts.

        A caller that knows only totals may set `messages` and `updates_received` at the end:
        nothing decided here depends on them.

        Args:
            items: The message's `TimeCounts` and its malformed updates (an `Update` with a
                negative time or a zero diff), in message order.
            received: How many updates the message holds.
            partition: Where the message was read, named in the violations it causes.
            offset: The message's offset in ``partition``, named likewise.
        """
        self.messages += 1
        self.updates_received += received
        where = {"partition": partition, "offset": offset}
        reported, start = self._reported, self._start
        for item in items:
            if not isinstance(item, TimeCounts):
                self._bad_update(item[0], item[1], item[2], where)
                continue
            time, fresh, conflicts = item
            if reported is None or time < reported or time < start:
                self._late_counts(time, fresh, conflicts, where)
                continue
            for data, first, diff in conflicts:
                self.violate(
                    "conflicting_diff",
                    time,
                    f"data {data!r} at time {time} has diffs {first} and {diff}",
                    **where,
                )
            if fresh:
                if time not in self._pending:
                    self._track(time)
                    self._pending[time] = 0
                self._pending[time] += fresh
                self._settle(time, fresh, where)
        self._graft_progress(where)
        self._advance()

    def _late_counts(self, time: int, fresh: int, conflicts: tuple, where: dict) -> None:
        if fresh:
            self.late.append((where["partition"], where["offset"], time))
        if self.strict is None or time < self._start:
            self.duplicates += fresh + len(conflicts)
            return
        if fresh:
            self.late_violations.append((len(self.violations), fresh))
            for _ in range(fresh):
                self.violate("over_count", time, "", **where)
        for data, _first, diff in conflicts:
            seen = self._late_diffs.setdefault((data, time), set())
            if diff in seen:
                self.duplicates += 1
                continue
            seen.add(diff)
            self.violate(
                "conflicting_diff",
                time,
                f"data {data!r} at time {time} arrived with diff {diff} after the time "
                "was reported with another diff",
                **where,
            )

    def _release(self, time: int, finished: list[Update]) -> None:
        self._held -= self._pending.pop(time, 0)
