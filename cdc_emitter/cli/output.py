"""What the commands print: text and JSON renderings of results, and the terminal status line.

No library logic here: each function turns a result object into the exact text a user (or a
script reading ``--json``) sees, so the CLI tests can pin it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from time import monotonic, sleep
from typing import Any


def frontier_text(frontier: tuple[int, ...]) -> str:
    return "[] (closed)" if frontier == () else f"[{frontier[0]}]"


def dumps(obj: Any) -> str:
    """One compact JSON line; strict JSON (a NaN or an infinity raises, never prints bare)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sorted_collection(collection: dict, codec: Any) -> list:
    """A collection dict's ``(data, count)`` pairs in ``verify --output`` order (by data)."""
    key = codec.sort_key
    return sorted(collection.items(), key=lambda kv: key(kv[0]))


def write_collection(fh: Any, rows: Any, codec: Any) -> None:
    """``verify --output``: a ``{"data": {...}, "count": n}`` line per ``(data, count)`` pair
    (given sorted by data)."""
    to_json = codec.data_to_json
    for data, count in rows:
        fh.write(dumps({"data": to_json(data), "count": count}) + "\n")


def write_history(fh: Any, history: Any, codec: Any) -> None:
    """``verify --history``: ``{"data": {...}, "time": t, "diff": d}`` lines (given in time order)."""
    to_json = codec.data_to_json
    for data, time, diff in history:
        fh.write(dumps({"data": to_json(data), "time": time, "diff": diff}) + "\n")


class StatusLine:
    """One rewritten status line on stderr, only when stderr is a terminal.

    A step that takes long (Spark starting, a job writing) shows its elapsed seconds, counted
    up once a second by a daemon thread, so that a long stretch is never silent. The line goes
    to a copy of the terminal made when the line is made: a quiet Spark start points the
    process's stderr at Spark's log file meanwhile."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.shown = False
        self._text = ""
        self._since = 0.0
        self._lock = threading.Lock()
        self._ticking = threading.Event()  # set while a ticker thread runs
        self._out: Any = None
        if self.enabled:
            sys.stderr.flush()
            self._out = os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8")

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._text, self._since = text, monotonic()
            self._draw()
            if not self._ticking.is_set():
                self._ticking.set()
                threading.Thread(target=self._tick, name="status-line", daemon=True).start()

    def _draw(self) -> None:
        elapsed = monotonic() - self._since
        suffix = f" ({elapsed:.0f}s)" if elapsed >= 2 else ""
        self._out.write(f"\r\x1b[K{self._text}{suffix}")
        self._out.flush()
        self.shown = True

    def _tick(self) -> None:
        while True:
            sleep(1)
            with self._lock:
                if not self.shown:
                    self._ticking.clear()
                    return
                self._draw()

    def __getstate__(self) -> dict:
        # a callback holding the line is pickled with a foreachBatch function on Spark Connect
        # (whose server runs it): a copy there draws nothing
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__(enabled=False)  # type: ignore[misc]

    def done(self) -> None:
        with self._lock:
            if self.shown:
                self._out.write("\n")
                self._out.flush()
                self.shown = False


#: Violations of one kind listed one per line in the text summary (``--json`` has them all).
LISTED_PER_KIND = 20


def verify_summary_text(topic: str, result: Any, timeout: float | None) -> str:
    """The text ``verify`` prints: where it stopped, the counts, each violation (the first
    ``LISTED_PER_KIND`` of each kind), the likely causes, what is pending, and the verdict."""
    lines = []
    frontier = frontier_text(result.frontier)
    within = "in time" if timeout is None else f"within {timeout:g}s"
    if result.target is None:
        where = "end of topic read" if result.reached else f"end of topic NOT read {within}"
    else:
        target = frontier_text(result.target)
        where = (
            f"target {target} reached"
            if result.reached
            else f"target {target} NOT reached {within}"
        )
    lines.append(f"topic {topic}: frontier {frontier}, {where}")
    lines.append(
        f"{result.messages} messages, {result.updates} updates, "
        f"{result.duplicates} duplicates dropped"
    )
    verdict = result.verdict
    if result.violations:
        lines.append(f"{len(result.violations)} violations:")
        listed: dict[str, int] = {}
        for v in result.violations:
            listed[v.kind] = listed.get(v.kind, 0) + 1
            if listed[v.kind] > LISTED_PER_KIND:
                continue
            at = [] if v.time is None else [f"at time {v.time}"]
            if v.partition is not None:
                at.append(f"(partition {v.partition}, offset {v.offset})")
            lines.append("  " + " ".join([v.kind, *at]) + f": {v.detail}")
        for kind, n in listed.items():
            if n > LISTED_PER_KIND:
                lines.append(f"  ... and {n - LISTED_PER_KIND} more {kind} (--json lists them all)")
    lines.extend(f"hint: {hint}" for hint in result.hints)
    if (
        verdict in ("incomplete", "violations")
        and result.target is None
        and result.pending is not None
    ):
        lines.extend(pending_lines(result.pending, result.frontier))
    if verdict == "violations":
        lines.append("FAILED: protocol violations")
    elif verdict == "not_reached":
        lines.append(
            "NOT VERIFIED: the target was not reached in time"
            if result.target is not None
            else "NOT VERIFIED: the end of the topic was not read in time"
        )
    elif verdict == "empty":
        lines.append("NOT VERIFIED: the topic holds no messages, so nothing is proven")
    elif verdict == "incomplete":
        lines.append(
            f"NOT VERIFIED: the topic ends before it proves what it holds beyond "
            f"frontier {frontier}"
        )
    else:
        lines.append("verified: no violations")
    return "\n".join(lines)


#: Times listed in the line of one waiting statement.
TIMES_PER_STATEMENT = 5


def waiting_line(waiting: Any) -> str:
    """One line for a statement whose counted updates are not all there (a `cdc_emitter.protocol.reader.Waiting`): who
    claimed what, where the statement is, and how many updates are missing at which times."""
    if waiting.writer is None:
        who = "an unnamed writer"
    elif waiting.batch is None:
        who = f"writer {waiting.writer}"
    else:
        who = f"writer {waiting.writer} batch {waiting.batch}"
    upper = "∞" if waiting.upper is None else waiting.upper
    where = ""
    if waiting.partition is not None:
        where = f" (partition {waiting.partition}, offset {waiting.offset})"
    times = ", ".join(map(str, waiting.times[:TIMES_PER_STATEMENT]))
    if waiting.open_times > TIMES_PER_STATEMENT:
        times += f" and {waiting.open_times - TIMES_PER_STATEMENT} more"
    plural = "s" if waiting.open_times > 1 else ""
    return (
        f"pending: {who} claimed [{waiting.lower}, {upper}){where}: {waiting.missing} of "
        f"{waiting.counted} counted updates missing at time{plural} {times}"
    )


def pending_lines(pending: Any, frontier: tuple[int, ...]) -> list[str]:
    """What keeps ``frontier`` where it is, one line per cause."""
    out = []
    for time, count, received in pending.stalled[:LISTED_PER_KIND]:
        out.append(f"pending: time {time} is announced with {count} updates, {received} arrived")
    if len(pending.stalled) > LISTED_PER_KIND:
        out.append(f"pending: ... and {len(pending.stalled) - LISTED_PER_KIND} more stalled times")
    waiting = getattr(pending, "waiting", ())
    out.extend(waiting_line(w) for w in waiting[:LISTED_PER_KIND])
    if len(waiting) > LISTED_PER_KIND:
        out.append(
            f"pending: ... and {len(waiting) - LISTED_PER_KIND} more statements waiting for "
            "their updates (--json lists them all)"
        )
    if pending.gap is not None:
        a, b = pending.gap
        out.append(f"pending: no progress statement covers [{a}, {b}); statements beyond it wait")
    if pending.updates:
        times = ", ".join(map(str, pending.times)) + (", ..." if len(pending.times) >= 20 else "")
        if pending.statements == 0:
            out.append(
                f"pending: {pending.updates} updates (at times {times}) and no progress "
                "statement at all"
            )
        else:
            out.append(
                f"pending: {pending.updates} updates held at times {times}, beyond "
                f"frontier {frontier_text(frontier)}"
            )
    return out


def export_summary(
    source: str, previous: str | None, topic: str, at_time: int | None, written: Any
) -> dict:
    """The JSON summary of ``export`` from the sink's BatchResult."""
    lower, upper = written.lower, written.upper
    return {
        "source": source,
        "previous": previous,
        "topic": topic,
        "time": lower if at_time is None else at_time,
        "lower": [lower],
        "upper": [] if upper is None else [upper],
        "frontier": [] if upper is None else [upper],
        "updates": written.updates,
        "messages": written.messages,
    }
