"""The sink's decisions about a batch's interval ``[lower, upper)`` and its time (pure).

A batch writes updates at times in ``[lower, upper)`` and one progress statement for that
interval. ``lower`` is the topic's frontier for a new batch, or what the batch's first attempt
recorded; these functions decide the rest from what the sink knows, so a re-run decides exactly
what its first attempt decided.

Guarantees: a re-run (``recorded`` given) keeps the recorded interval and time, and fails with
`BadInputError` rather than widen it; a new batch never starts below
the frontier (a late time is refused, or advanced to the frontier with ``late="advance"``).
"""

from __future__ import annotations

from typing import NamedTuple

from cdc_emitter.errors import BadInputError, LateUpdateError
from cdc_emitter.protocol.updates import MAX_LONG


class Recorded(NamedTuple):
    """What a batch's first attempt decided: its interval and, in the default time mode, its time."""

    lower: int
    upper: int | None
    time: int | None


def recorded_from_statement(lower: int, upper: int | None, column_mode: bool) -> Recorded:
    """The decision of a first attempt found as its progress statement in the topic: in the
    default time mode its time was the last of its interval."""
    return Recorded(lower, upper, None if column_mode or upper is None else upper - 1)


def batch_time(
    *,
    topic: str,
    lower: int,
    recorded: Recorded | None,
    fixed_time: int | None,
    batch_id: int | None,
    time_offset: int,
    late: str,
    redundant: bool = False,
) -> int:
    """The time of every update of a default-mode batch (no time column).

    Recorded, else ``write(time=...)``'s (refused below ``lower`` unless ``late="advance"``), else
    ``time_offset + batch_id``, else ``lower``; never below ``lower`` — except for a
    ``redundant`` writer, whose time stays what its twins' is (the claim compares it with
    theirs).
    """
    if recorded is not None:
        return recorded.time if recorded.time is not None else lower
    if redundant and fixed_time is not None:
        return fixed_time
    if redundant and batch_id is not None:
        return time_offset + batch_id
    if fixed_time is not None:
        if fixed_time < lower and late == "error":
            raise LateUpdateError(
                f"time {fixed_time} is late: topic {topic!r} is complete up to "
                f"frontier {lower}; write at a time >= {lower} or pass late='advance'"
            )
        return max(fixed_time, lower)
    if batch_id is not None:
        return max(time_offset + batch_id, lower)
    return lower


def batch_upper(
    *,
    what: str,
    lower: int,
    recorded: Recorded | None,
    close: bool,
    column_mode: bool,
    time: int | None,
    max_time: int | None,
    upper_hint: int | None,
) -> int | None:
    """The batch's upper bound (None: the history is closed).

    Recorded (a re-run that now holds an update at or beyond it is refused: its input changed);
    else none with ``close``; else the batch's time + 1 (default mode); else ``write_upto``'s
    ``upper_hint`` (refused if an update is not below it); else the largest time + 1. Never below
    ``lower``.
    """
    if recorded is not None:
        upper = recorded.upper
        if upper is not None and max_time is not None and max_time >= upper:
            raise BadInputError(
                f"{what} is a re-run whose recorded interval is [{lower}, {upper}), but now has "
                f"an update at time {max_time}: the batch's input changed between attempts "
                "(a streaming source must replay the same data)"
            )
        return upper
    if close:
        return None
    if not column_mode:
        assert time is not None, "a default-mode batch has a time"
        return check_upper(what, time + 1)
    if upper_hint is not None:
        if max_time is not None and max_time >= upper_hint:
            raise BadInputError(
                f"{what}: update at time {max_time} is not below the batch's upper "
                f"{upper_hint} (write_upto)"
            )
        return max(upper_hint, lower)
    return check_upper(what, max(max_time + 1 if max_time is not None else lower, lower))


def check_upper(what: str, upper: int) -> int:
    """``upper``, refused when it does not fit a long (a batch at time 2^63 − 1 that does not
    close the history): no statement could say the interval, so nothing is written."""
    if upper > MAX_LONG:
        raise BadInputError(
            f"{what}: an update at time {upper - 1} needs an interval up to {upper}, which does "
            f"not fit a 64-bit long: times must be below {MAX_LONG}, unless the batch closes the "
            "history (close=True). Nothing was written"
        )
    return upper
