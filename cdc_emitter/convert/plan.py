"""Which source versions a converter's micro-batch may write and close (pure: no Spark).

A Delta table's change data feed streams commit versions in order, but may split one version
over several micro-batches: Delta admits a commit's change files whole, yet the added and removed
data files of a plain append or delete one by one under ``maxFilesPerTrigger``. CDCv2 closes time
``v`` with a progress statement that counts every update at ``v``, and the sink gives each batch
the interval ``[frontier, largest time + 1)`` — so a version written before all of its rows
arrived would be closed early, and its other rows would be late.

`plan_versions` decides, per micro-batch, from the rows it holds per version:

* every version below the batch's largest one is complete (the stream has moved past it);
* the largest is complete when the rows delivered for it — in this batch, plus those of earlier
  batches that held it open — are all its change rows in the table (one count of one version);
* a complete version's rows are written as the batch holds them, except a version an earlier
  batch held open: it is read whole from the table instead (its earlier rows were not written);
* an incomplete largest version is held open: not written, remembered as ``(version, rows
  delivered so far)`` for the next batch (the converter records it beside the checkpoint, so a
  re-run or a restart decides exactly the same).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import NamedTuple

from cdc_emitter.errors import CdcError

__all__ = [
    "OpenVersion",
    "VersionPlan",
    "PlanRecord",
    "plan_versions",
    "WatermarkRecord",
    "watermark_window",
]

# the changefeeds' planning lives in cdc_emitter.convert.watermark; its names stay here too
from cdc_emitter.convert.watermark import WatermarkRecord as WatermarkRecord  # noqa: E402
from cdc_emitter.convert.watermark import watermark_window as watermark_window  # noqa: E402


class OpenVersion(NamedTuple):
    """A version delivered in part: ``seen`` of its change rows have arrived so far."""

    version: int
    seen: int


class VersionPlan(NamedTuple):
    from_batch: tuple[int, ...]  # versions written from the batch's own rows
    reread: int | None  # a version held open before and complete now: read whole from the table
    held: OpenVersion | None  # the version left open after this batch (nothing of it written)

    @property
    def writes(self) -> bool:
        return bool(self.from_batch) or self.reread is not None


def plan_versions(
    batch_counts: Mapping[int, int],
    held: OpenVersion | None,
    table_count: Callable[[int], int],
    *,
    where: str = "the source",
) -> VersionPlan:
    """The plan of one micro-batch (see the module docstring).

    ``batch_counts``: change rows per version in the batch; ``held``: what the previous batch
    left open; ``table_count(v)``: how many change rows version ``v`` has in the table (called
    once, for the batch's largest version). Raises `CdcError` when the stream and the table
    disagree (a version arriving after a later one, more rows delivered than the table has).
    """
    if not batch_counts:
        return VersionPlan((), None, held)
    newest = max(batch_counts)
    if held is not None and held.version > min(batch_counts):
        raise CdcError(
            f"{where}: the stream delivered version {min(batch_counts)} after version "
            f"{held.version}, which an earlier batch held open; versions must arrive in order"
        )
    delivered = batch_counts[newest] + (
        held.seen if held is not None and held.version == newest else 0
    )
    total = table_count(newest)
    if delivered > total:
        raise CdcError(
            f"{where}: version {newest} has {total} change rows in the table but the stream "
            f"delivered {delivered}; its change data was rewritten or removed (VACUUM) while the "
            "converter ran: restart it from a new checkpoint into a new topic"
        )
    complete = delivered == total
    open_version = None if held is None else held.version
    from_batch = tuple(
        sorted(v for v in batch_counts if v != open_version and (v < newest or complete))
    )
    reread = (
        open_version if open_version is not None and (open_version < newest or complete) else None
    )
    return VersionPlan(from_batch, reread, None if complete else OpenVersion(newest, delivered))


class PlanRecord(NamedTuple):
    """A batch's plan as the converter records it beside the checkpoint (first decision wins)."""

    batch_id: int
    plan: VersionPlan

    def to_json(self) -> str:
        held = None if self.plan.held is None else list(self.plan.held)
        return json.dumps(
            {
                "version": 1,
                "batch_id": self.batch_id,
                "from_batch": list(self.plan.from_batch),
                "reread": self.plan.reread,
                "held": held,
            },
            sort_keys=True,
        )

    @classmethod
    def from_lines(cls, lines: list[str], where: str) -> PlanRecord:
        try:
            obj = json.loads("\n".join(lines))
            held = (
                None
                if obj["held"] is None
                else OpenVersion(int(obj["held"][0]), int(obj["held"][1]))
            )
            reread = None if obj["reread"] is None else int(obj["reread"])
            plan = VersionPlan(tuple(int(v) for v in obj["from_batch"]), reread, held)
            return cls(int(obj["batch_id"]), plan)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CdcError(f"converter log record {where} is unreadable: {exc}") from exc
