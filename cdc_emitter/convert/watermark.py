"""Which times a watermarked changefeed's micro-batch may write and close (pure: no Spark).

CockroachDB's and YDB's changefeeds deliver rows in any order per partition; a ``resolved``
message on a partition promises no new row at or below its timestamp on that partition. So the
times below the smallest resolved timestamp over *all* partitions are complete. A micro-batch
writes the rows of ``[lower, upper)`` (`watermark_window`), read again from the source topic
from the first offset that may hold an unwritten row (``pending``) to the batch's end; the rest
waits in the topic. The converter records each batch's decision beside its checkpoint
(`WatermarkRecord`), so a re-run or a restart decides exactly the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

from cdc_emitter.errors import CdcError

__all__ = ["WatermarkRecord", "watermark_window"]


class WatermarkRecord(NamedTuple):
    """What a converter decided for one micro-batch (recorded beside the checkpoint).

    ``resolved``: the newest resolved time per source partition so far; ``lower``/``upper``: the
    times this batch writes and closes (equal: nothing to write); ``start``/``end``: per
    partition, the offsets of the source read for the batch (``end`` is also where the stream is);
    ``pending``: per partition, the first offset of a row not yet written, where the next read
    starts.
    """

    batch_id: int
    resolved: dict[int, int]
    lower: int
    upper: int
    start: dict[int, int]
    end: dict[int, int]
    pending: dict[int, int]

    def to_json(self) -> str:
        def keyed(d: Mapping[int, int]) -> dict[str, int]:
            return {str(k): int(v) for k, v in sorted(d.items())}

        return json.dumps(
            {
                "version": 1,
                "batch_id": self.batch_id,
                "resolved": keyed(self.resolved),
                "lower": self.lower,
                "upper": self.upper,
                "start": keyed(self.start),
                "end": keyed(self.end),
                "pending": keyed(self.pending),
            },
            sort_keys=True,
        )

    @classmethod
    def from_lines(cls, lines: list[str], where: str) -> WatermarkRecord:
        try:
            obj = json.loads("\n".join(lines))

            def keyed(name: str) -> dict[int, int]:
                return {int(k): int(v) for k, v in obj[name].items()}

            return cls(
                int(obj["batch_id"]),
                keyed("resolved"),
                int(obj["lower"]),
                int(obj["upper"]),
                keyed("start"),
                keyed("end"),
                keyed("pending"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CdcError(f"converter log record {where} is unreadable: {exc}") from exc


def watermark_window(
    previous: WatermarkRecord | None,
    partitions: list[int],
    batch_first: Mapping[int, int],
    batch_end: Mapping[int, int],
    batch_resolved: Mapping[int, int],
) -> tuple[dict[int, int], int, int, dict[int, int], dict[int, int]]:
    """``(resolved, lower, upper, start, end)`` of the next micro-batch.

    ``batch_first`` / ``batch_end``: per partition, the batch's first offset and last offset + 1;
    ``batch_resolved``: the newest resolved time per partition in the batch. ``upper`` is the
    smallest resolved time over ``partitions`` (every partition of the source topic), never
    below ``lower``; while a partition has had no resolved message, nothing is complete.
    """
    resolved = dict(previous.resolved) if previous else {}
    for p, t in batch_resolved.items():
        resolved[p] = max(t, resolved.get(p, t))
    lower = previous.upper if previous else 0
    upper = lower
    if partitions and all(p in resolved for p in partitions):
        upper = max(lower, min(resolved[p] for p in partitions))
    # a partition read for the first time starts at the batch's first offset of it
    start = dict(previous.pending) if previous else {}
    end = dict(previous.end) if previous else {}
    for p, first in batch_first.items():
        start.setdefault(p, first)
        end[p] = max(batch_end[p], end.get(p, batch_end[p]))
    return resolved, lower, upper, start, end
