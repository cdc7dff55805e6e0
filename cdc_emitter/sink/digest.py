"""A batch's digest: how a re-run tells whether its source replayed the same data (pure).

Every progress statement the sink writes carries, in a header, the digest of its batch: the XOR
of its updates' 64-bit hashes (`cdc_emitter.spark.columns.digest_share`; any order, any
batching) and its update counts per time. A re-run of a batch whose claim is in the topic
computes the digest of what it would write and compares it before writing anything: the same,
and it writes its updates again under that claim (duplicates); other, and it raises
`ReplayError` (`replay_message`). A redundant writer's batch is compared the same way with
another writer's claim.

Guarantees: `parse_digest` reads back exactly what `format_digest` wrote, as
`digest_form` keeps it, and None for a header it cannot compare (absent, unreadable, or of
another `DIGEST_VERSION`) — a re-run then writes its updates again: duplicates at most.
A header holds at most `DIGEST_TIMES` counts; beyond that their hash, so it fits a message.
"""

from __future__ import annotations

import hashlib
import json
from operator import itemgetter

__all__ = [
    "DIGEST_TIMES",
    "DIGEST_VERSION",
    "digest_form",
    "format_digest",
    "parse_digest",
    "replay_message",
]

#: Times a digest header lists; a batch with more lists a hash of its counts (a header must fit
#: in the message) — a re-run then still compares exactly, and says less about what changed.
DIGEST_TIMES = 1000

#: How update hashes are made (`cdc_emitter.spark.columns.digest_share`); 2 since the hash
#: became xxhash64(xxhash64(data, time), diff) — a digest of another version is not compared.
DIGEST_VERSION = 2


def digest_form(xor: int, counts: tuple) -> tuple:
    """``(xor, counts)`` as a digest header keeps it: ``counts`` as ``((time, n), ...)`` sorted by
    time, or when there are more than `DIGEST_TIMES`, ``("sha256", hex, total, times)``."""
    if len(counts) <= DIGEST_TIMES:
        return xor, counts
    text = json.dumps(counts, separators=(",", ":")).encode()  # as lists: [[time,n],...]
    return xor, (
        "sha256",
        hashlib.sha256(text).hexdigest(),
        sum(map(itemgetter(1), counts)),
        len(counts),
    )


def format_digest(xor: int, counts: dict[int, int]) -> str:
    """The digest header: the XOR of the updates' hashes and the counts per time (or their hash)."""
    _xor, form = digest_form(xor, tuple(sorted(counts.items())))
    out: dict = {"v": DIGEST_VERSION, "xor": f"{xor & (2**64 - 1):016x}"}
    if form and form[0] == "sha256":
        out.update(sha256=form[1], total=form[2], times=form[3])
    else:
        out["counts"] = form
    return json.dumps(out, separators=(",", ":"))


def parse_digest(text: str | None) -> tuple[int, tuple] | None:
    """``(xor, counts)`` in `digest_form` from a digest header; None when absent,
    unreadable or of another digest version."""
    if text is None:
        return None
    try:
        obj = json.loads(text)
        if obj.get("v") != DIGEST_VERSION:
            return None
        xor = int(obj["xor"], 16)
        if "sha256" in obj:
            counts: tuple = ("sha256", str(obj["sha256"]), int(obj["total"]), int(obj["times"]))
        else:
            counts = tuple((int(t), int(n)) for t, n in obj["counts"])
    except (ValueError, KeyError, TypeError):
        return None
    return (xor - 2**64 if xor >= 2**63 else xor), counts


def replay_message(what: str, batch_id: int | None, first: tuple, now: tuple) -> str:
    """The `ReplayError` text for a re-run whose digest ``now``
    differs from its first attempt's ``first`` (both in `digest_form`): what each held,
    that nothing was written, and the way out."""

    def said(counts: tuple) -> str:
        if counts and counts[0] == "sha256":
            return f"{counts[2]} updates at {counts[3]} times"
        total = sum(n for _t, n in counts)
        times = ", ".join(f"{n} at time {t}" for t, n in counts[:5]) + (
            ", ..." if len(counts) > 5 else ""
        )
        return f"{total} updates ({times})" if counts else "no updates"

    same = (
        "the same number of updates but other rows"
        if first[1] == now[1]
        else f"{said(first[1])} then, {said(now[1])} now"
    )
    return (
        f"{what}: the source replayed different data for batch {batch_id} than its first "
        f"attempt wrote ({same}). Nothing was written: the topic keeps the first attempt, "
        "whose progress statement is already there. Make the source replay the same rows for "
        "a batch id (a replayable source such as Kafka, files or Delta; no rand() or "
        "current_timestamp() in the query), or restart the query from a new checkpoint to "
        "write the new data as new batches"
    )
