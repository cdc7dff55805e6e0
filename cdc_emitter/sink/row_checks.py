"""The sink's checks of each row, as Spark expressions, and our errors found again in a failed
job's text.

A `Check` is a condition on a row and the message that names it; `raise_in_job` makes a Column
that fails the Spark job with a marked message, and `task_error` turns the failed job's error
back into our `BadInputError` or `LateUpdateError`, with the batch's name and time put back
(the plans name them `BATCH` and `BATCH_TIME`, so one plan serves every batch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyspark.sql import functions as F

from cdc_emitter.errors import SHOWN_CHARS, BadInputError, CdcError, LateUpdateError
from cdc_emitter.spark.columns import DIFF, TIME

__all__ = [
    "BATCH",
    "BATCH_TIME",
    "ROW",
    "Check",
    "raise_in_job",
    "row_checks",
    "shortened",
    "task_error",
]

#: Marks our own messages inside Spark's error text (raise_error), with the error class to raise.
_MARK = "[cdc-emitter:{kind}] "
_MARKED = re.compile(r"\[cdc-emitter:(\w+)\] (.*?)(?: SQLSTATE: \w+)?(?:\n|$)")
#: In a `Check`'s message parts: the bad row's data columns as JSON.
ROW = "\0row"
#: In the texts of a `MessagePlan`: the batch's name, put back by `task_error`.
BATCH = "@cdc-emitter-batch@"
#: ... and the batch's time, where the rows do not carry it (`MessagePlan.updates`).
BATCH_TIME = "@cdc-emitter-time@"


@dataclass(frozen=True)
class Check:
    """A per-row condition that fails the batch with a message made of ``parts``: texts, Columns
    (values of the bad row) and `ROW`."""

    condition: Any  # a boolean Column: True for a bad row
    kind: str  # the error class: "BadInputError" or "LateUpdateError"
    parts: tuple


def row_checks(
    *, what: str, lower: int, recorded_upper: int | None, time_column: str | None, diff_column: str
) -> list[Check]:
    """The per-row checks of a batch whose interval starts at ``lower`` (built per batch: they
    hold its frontier): in column mode a null, negative or late time; a null diff; and for a
    re-run whose first attempt recorded ``recorded_upper``, a time at or beyond it."""
    t, d = F.col(TIME), F.col(DIFF)
    checks = []
    if time_column is not None:
        tcol = time_column
        checks += [
            Check(
                t.isNull(),
                "BadInputError",
                (
                    f"{what}: null time in column {tcol!r} (e.g. row ",
                    ROW,
                    "); every row needs a non-negative integer time",
                ),
            ),
            Check(
                t < 0,
                "BadInputError",
                (
                    f"{what}: negative time ",
                    t,
                    f" in column {tcol!r} (e.g. row ",
                    ROW,
                    "); times must be non-negative",
                ),
            ),
            Check(
                t < lower,
                "LateUpdateError",
                (
                    f"{what}: update at time ",
                    t,
                    f" in column {tcol!r} is late (e.g. row ",
                    ROW,
                    f"): the topic is complete up to frontier {lower}; pass late='advance' to move "
                    f"late updates to {lower}",
                ),
            ),
        ]
    checks.append(
        Check(
            d.isNull(),
            "BadInputError",
            (f"{what}: null diff in column {diff_column!r} (e.g. row ", ROW, ")"),
        )
    )
    if recorded_upper is not None:
        checks.append(
            Check(
                t >= recorded_upper,
                "BadInputError",
                (
                    f"{what} is a re-run whose recorded interval is [{lower}, {recorded_upper}), but now has "
                    "an update at time ",
                    t,
                    ": the batch's input changed between attempts (a streaming "
                    "source must replay the same data)",
                ),
            )
        )
    return checks


def shortened(text: Any) -> Any:
    """The Spark string ``text`` cut as `shorten` cuts a Python one."""
    cut = F.concat(
        F.substring(text, 1, SHOWN_CHARS),
        F.lit("… ("),
        (F.length(text) - F.lit(SHOWN_CHARS)).cast("string"),
        F.lit(" more characters)"),
    )
    return F.when(F.length(text) > F.lit(SHOWN_CHARS), cut).otherwise(text)


def raise_in_job(kind: str, *parts: Any) -> Any:
    """A Column that fails the Spark job with our error ``kind`` (found again by `task_error`)
    and the text of ``parts`` (Columns)."""
    return F.raise_error(F.concat(F.lit(_MARK.format(kind=kind)), *parts))


def task_error(exc: BaseException, what: str, time: int | None = None) -> CdcError | None:
    """Our error behind a failed Spark job (a ``raise_in_job`` of ours), or None;
    ``what``: the batch's name, for `BATCH` in the text; ``time``: its time, for
    `BATCH_TIME`."""
    found = _MARKED.findall(str(exc))
    if not found:
        return None
    kind, message = found[-1]
    cls = {"LateUpdateError": LateUpdateError}.get(kind, BadInputError)
    return cls(message.strip().replace(BATCH, what).replace(BATCH_TIME, str(time)))
