"""What the commands print: text and JSON renderings of results, and the terminal status line.

No library logic here: each function turns a result object into the exact text a user (or a
script reading ``--json``) sees, so the CLI tests can pin it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click


def frontier_text(frontier: tuple[int, ...]) -> str:
    return "[] (closed)" if frontier == () else f"[{frontier[0]}]"


def dumps(obj: Any) -> str:
    """One compact JSON line."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class StatusLine:
    """One rewritten status line on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            click.echo(f"\r\x1b[K{text}", err=True, nl=False)
            self.shown = True

    def done(self) -> None:
        if self.shown:
            click.echo("", err=True)
            self.shown = False


def verify_summary_text(topic: str, result: Any, timeout: float | None) -> str:
    lines = []
    frontier = frontier_text(result.frontier)
    within = "in time" if timeout is None else f"within {timeout:g}s"
    if result.target is None:
        where = "end of topic read" if result.reached else f"end of topic NOT read {within}"
    else:
        target = frontier_text(result.target)
        where = f"target {target} reached" if result.reached else f"target {target} NOT reached {within}"
    lines.append(f"topic {topic}: frontier {frontier}, {where}")
    lines.append(f"{result.messages} messages, {result.updates} updates, "
                 f"{result.duplicates} duplicates dropped")
    if result.violations:
        lines.append(f"{len(result.violations)} violations:")
        for v in result.violations:
            at = [] if v.time is None else [f"at time {v.time}"]
            if v.partition is not None:
                at.append(f"(partition {v.partition}, offset {v.offset})")
            lines.append("  " + " ".join([v.kind, *at]) + f": {v.detail}")
        lines.append("FAILED: protocol violations")
    elif not result.reached:
        lines.append("NOT VERIFIED: the target was not reached in time")
    else:
        lines.append("verified: no violations")
    return "\n".join(lines)


def export_summary(source: str, previous: str | None, topic: str, at_time: int | None,
                   written: Any) -> dict:
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
