"""Where a checked batch's claim goes, given what the topic holds now (pure).

A batch's progress statement is its **claim**: committed before any of its updates, in a
transaction every writer of the topic shares (`cdc_emitter.kafka.claims`), on the topic's state
as read after this writer fenced the others. `decide_claim` takes that state and the batch's
counts and digest, and says what the batch does:

- ``new``: commit a statement for ``[lower, upper)`` — the topic's frontier now, which may be
  past the one the batch was decided from when another writer claimed meanwhile, as long as
  every update of the batch is at or after it (the batch then writes after the other);
- ``own``: a re-run whose claim is committed already: no new statement; its updates are written
  again (duplicates at most) — a first attempt may have died before they were all written;
- ``redundant``: a writer declared redundant whose batch another writer already claimed with
  exactly the same updates (counts per time and digest): its updates are written as duplicates,
  which complete the other writer's batch if that one died.

Anything else conflicts with what another writer made visible, and raises before this batch
writes anything: `ConcurrentWriterError` naming that writer and batch.

Guarantees: every update is written only inside a committed claim whose counts and digest are
those of the updates; so no interleaving of writers can put an update into another writer's
interval with other counts, and readers that follow the protocol read one history.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

from cdc_emitter.errors import ConcurrentWriterError, ReplayError
from cdc_emitter.sink.digest import digest_form, parse_digest, replay_message

__all__ = ["Claim", "Stated", "decide_claim", "stated_covering"]


class Stated(NamedTuple):
    """A statement found on partition 0: who wrote it, its interval and digest header."""

    writer: str
    batch: int | None  # None: a batch written by `CdcSink.write`, or by another tool
    lower: int
    upper: int | None
    digest: str | None

    def name(self) -> str:
        upper = "∞" if self.upper is None else self.upper
        batch = "" if self.batch is None else f" batch {self.batch}"
        return f"writer {self.writer}{batch} [{self.lower}, {upper})"


class Claim(NamedTuple):
    """What the batch does (see the module docstring)."""

    kind: Literal["new", "own", "redundant"]
    lower: int
    upper: int | None
    others: tuple[Stated, ...] = ()  # the statements a redundant batch duplicates


def stated_covering(
    batches: Mapping[tuple[str, int], tuple[int, int | None]],
    digests: Mapping[tuple[str, int], str],
    first: int,
    last: int,
) -> list[Stated]:
    """The statements among ``batches`` whose interval meets ``[first, last]``, by lower bound."""
    found = [
        Stated(writer, batch, lower, upper, digests.get((writer, batch)))
        for (writer, batch), (lower, upper) in batches.items()
        if lower <= last and (upper is None or upper > first) and (upper is None or upper > lower)
    ]
    return sorted(found, key=lambda s: s.lower)


def decide_claim(
    *,
    what: str,
    writer: str,
    batch_id: int | None,
    lower: int,
    upper: int | None,
    frontier: int | None,
    own: Stated | None,
    counts: Mapping[int, int],
    digest: tuple[int, tuple],
    covering: list[Stated],
    redundant: bool,
) -> Claim:
    """Where the batch's claim goes.

    Args:
        what: how messages name the batch.
        writer: this batch's writer.
        batch_id: its id (None: a `CdcSink.write` batch).
        lower: the lower bound the batch was decided from (the frontier then, or its record).
        upper: its upper bound as decided (None: it closes the history).
        frontier: the topic's frontier now (None: closed).
        own: this writer's committed statement for this batch id, if any.
        counts: the batch's updates per time.
        digest: ``(xor, ((time, n), ...))`` of its updates.
        covering: the committed statements that meet the batch's times (`stated_covering`).
        redundant: the writer is declared one of several identical writers.

    Raises:
        ConcurrentWriterError: another writer's statement conflicts with this batch.
    """
    if own is not None:
        first = parse_digest(own.digest)
        if first is not None and first != digest_form(*digest):
            raise ReplayError(replay_message(what, batch_id, first, digest_form(*digest)))
        return Claim("own", own.lower, own.upper)
    times = sorted(t for t, n in counts.items() if n)
    if frontier is None:
        by = f" by {covering[-1].name()}" if covering else ""
        raise ConcurrentWriterError(
            f"{what}: the topic's history was closed{by} while this batch was prepared. "
            "Nothing was written; nothing more can be written to this topic"
        )
    if times and times[0] < frontier:  # a redundant writer's, or another writer's claim came
        if redundant:
            same = _same_as_stated(counts, digest, covering, times)
            if same is not None and times[-1] < frontier:
                return Claim("redundant", same[0].lower, same[-1].upper, tuple(same))
        raise _conflict(what, writer, batch_id, lower, upper, frontier, times, covering, redundant)
    if frontier == lower:
        return Claim("new", lower, upper)
    # every update is at or after the frontier another writer moved: write after it
    if upper is not None and upper <= frontier:  # an empty batch the others went past
        return Claim("new", frontier, frontier)
    return Claim("new", frontier, upper)


def _same_as_stated(
    counts: Mapping[int, int], digest: tuple[int, tuple], covering: list[Stated], times: list[int]
) -> list[Stated] | None:
    """The statements whose updates are exactly this batch's (counts per time and XOR of hashes),
    or None."""
    if not covering or covering[0].lower > times[0]:
        return None  # some of the batch's times were not found stated
    xor, merged, hashed = 0, {}, []
    for stated in covering:
        parsed = parse_digest(stated.digest)
        if parsed is None:
            return None
        xor ^= parsed[0]
        if parsed[1] and parsed[1][0] == "sha256":
            hashed.append(parsed[1])
            continue
        merged.update(dict(parsed[1]))
    ours = tuple(sorted((t, n) for t, n in counts.items() if n))
    if hashed:  # too many times to list: comparable only statement for statement
        if len(covering) != 1:
            return None
        return covering if digest_form(digest[0], ours) == (xor, hashed[0]) else None
    if xor != digest[0] or tuple(sorted(merged.items())) != ours:
        return None
    return covering


def _conflict(
    what: str,
    writer: str,
    batch_id: int | None,
    lower: int,
    upper: int | None,
    frontier: int,
    times: list[int],
    covering: list[Stated],
    redundant: bool,
) -> ConcurrentWriterError:
    first = times[0] if times else lower
    theirs = [s for s in covering if s.writer != writer or s.batch != batch_id]
    by = (
        ", ".join(s.name() for s in theirs[:3])
        + (f" and {len(theirs) - 3} more" if len(theirs) > 3 else "")
        if theirs
        else "another writer"
    )
    end = "∞" if upper is None else upper
    if redundant:
        why = (
            f"its updates at times from {first} are already stated by {by} with other updates "
            "(counts per time or digest differ, or the batches do not align): it is not "
            "redundant with that writer"
        )
        way_out = "Give redundant writers the same input and the same batches"
    else:
        why = (
            f"{by} claimed up to frontier {frontier} while this batch was prepared from "
            f"frontier {lower} (interval [{lower}, {end})), and this batch has updates from "
            f"time {first}"
        )
        way_out = (
            "Retry the batch (it is then decided from the topic's new frontier), or run the "
            "writers with redundant=True if they write the same data"
        )
    return ConcurrentWriterError(f"{what}: {why}. Nothing was written. {way_out}")
