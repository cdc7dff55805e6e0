"""Committing a checked batch's claim: its progress statement, before any of its updates.

Each attempt reads the topic's state (the frontier carried from this sink's last claim, or
the tail), lets `cdc_emitter.sink.claim.decide_claim` say what the batch does, and for a new
claim commits the statement in the transaction every writer of the topic shares
(`cdc_emitter.kafka.claims`). A commit that another writer fenced is tried again on fresh state,
after a short random pause; one whose outcome is in doubt (an error of the broker's) is looked
for in the topic on the next attempt.

Guarantees:

- a claim is committed on the state read after this writer fenced the others, so no other
  writer can have claimed in between;
- a statement this call sent whose commit raised, and which landed all the same, is found
  again by its interval and digest and taken as this call's new claim (never claimed twice);
- after `CLAIM_ATTEMPTS` fenced attempts the batch fails with `ConcurrentWriterError`, and
  after `IN_DOUBT_ATTEMPTS` in doubt with `DeliveryError`, nothing of its updates written.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable

from cdc_emitter.errors import ConcurrentWriterError, DeliveryError
from cdc_emitter.kafka.claims import Fenced, InDoubt
from cdc_emitter.kafka.frontier import TopicFrontier
from cdc_emitter.sink import commit, topic
from cdc_emitter.sink.batch import Batch, Checked, Written
from cdc_emitter.sink.claim import Claim, Stated, decide_claim, stated_covering
from cdc_emitter.sink.clients import TopicClients

__all__ = ["CLAIM_ATTEMPTS", "IN_DOUBT_ATTEMPTS", "Overtaken", "claim_statement"]

log = logging.getLogger("cdc_emitter.sink")  # CdcSink's logger: one name for the sink's lines

#: How many times a batch claims again after another writer fenced its claim, at most.
CLAIM_ATTEMPTS = 12
#: How many of those may end in doubt (`InDoubt`: an error of the broker's, not a fence).
IN_DOUBT_ATTEMPTS = 3


class Overtaken(Exception):
    """A batch whose time was the frontier, which another writer's claim moved: plan it again."""


def claim_statement(
    batch: Batch,
    upper: int | None,
    now: tuple[int, tuple],
    checked: Checked,
    *,
    clients: TopicClients,
    read_frontier: Callable[..., TopicFrontier],
    redundant: bool,
    max_message_bytes: int,
    own: Callable[[TopicFrontier], Stated | None],
    sending: Callable[[int, int | None, str], None],
    floats: bool = False,
) -> tuple[Claim, list[commit.Message], str]:
    """Claim ``batch``'s interval: commit its progress statement unless the topic holds its
    claim already (a re-run's) or, for a redundant writer, the same updates' claim.

    Args:
        batch: the batch, its interval decided.
        upper: its upper bound.
        now: its figures (`Checked.digest`): the digest and the counts per time.
        checked: the checked batch (for the statement's messages).
        clients: the sink's Kafka clients; their carried frontier is updated.
        read_frontier: reads the topic's frontier from its tail (`CdcSink.frontier`: with
            ``back_to``, back to a time).
        redundant: the writer is one of several identical ones.
        max_message_bytes: the largest message the sink makes.
        own: this batch's own claim in a state of the topic, if committed (`resume.own_claim`).
        sending: told ``(lower, upper, digest text)`` of a statement about to be committed.
        floats: the batch's one time is the frontier it was decided from: another writer's
            claim meanwhile raises `Overtaken` (the batch is planned again), not a conflict.

    Returns:
        The claim, the statement's messages (none when nothing was committed) and their digest
        header.

    Raises:
        Overtaken: ``floats``, and the frontier moved past the batch's time.
        ConcurrentWriterError: another writer's claim conflicts, or others kept claiming first.
        DeliveryError: the claim's transaction failed `IN_DOUBT_ATTEMPTS` times.
    """
    counts = dict(now[1])
    times = sorted(t for t, n in counts.items() if n)
    written = Written(counts, now[0], 0, 0)
    claims = clients.claims()
    pause, in_doubt = 0.05, 0
    # the statement of this call's last commit that raised (fenced or in doubt), with its
    # interval and digest: it may have landed, and then the claim found in the topic with the
    # same interval and digest is this call's new one
    sent: tuple[list[commit.Message], str, int, int | None] | None = None
    for _attempt in range(CLAIM_ATTEMPTS):
        if claims.ready():  # just fenced the others: what this sink carried may be stale
            clients.carried = None
        state = clients.carried or read_frontier()
        first = times[0] if times else batch.lower
        stated = own(state)
        moved = state.frontier != batch.lower
        if stated is None and (
            batch.recorded is not None or moved and times and first < (state.frontier or 0)
        ):
            # a re-run's claim, or the statements a redundant batch compares with, may be
            # older than the tail read: read back to them
            state = read_frontier(back_to=min(first, batch.lower))
            stated = own(state)
        if stated is None and floats and (state.frontier or 0) > batch.lower:
            raise Overtaken(batch.what)
        claim = decide_claim(
            what=batch.what,
            writer=batch.writer,
            batch_id=batch.batch_id,
            lower=batch.lower,
            upper=upper,
            frontier=state.frontier,
            own=stated,
            counts=counts,
            digest=now,
            covering=_covering(state, first, times[-1] if times else first),
            redundant=redundant,
        )
        if (
            claim.kind == "own"
            and stated is not None
            and sent is not None
            and (stated.lower, stated.upper, stated.digest) == (sent[2], sent[3], sent[1])
        ):  # this call's commit landed
            clients.carried = state
            return claim._replace(kind="new"), sent[0], sent[1]
        if claim.kind != "new":
            clients.carried = state
            return claim, [], ""

        claimed = dataclasses.replace(batch, lower=claim.lower)
        messages, digest_text = commit.progress_messages(
            claimed, claim.upper, written, checked, max_message_bytes
        )
        sending(claim.lower, claim.upper, digest_text)
        try:
            offset = claims.commit(messages)
        except Fenced as exc:
            sent = (messages, digest_text, claim.lower, claim.upper)
            log.info("%s: another writer claimed meanwhile (%s): claiming again", batch.what, exc)
            clients.carried = None
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 2.0)
            continue
        except InDoubt as exc:
            sent = (messages, digest_text, claim.lower, claim.upper)
            in_doubt += 1
            if in_doubt >= IN_DOUBT_ATTEMPTS:
                raise DeliveryError(
                    f"topic {clients.topic!r} partition 0: the progress statement's "
                    f"transaction failed {in_doubt} times ({exc}); whether the last was "
                    "committed is for the next attempt to find in the topic"
                ) from None
            log.warning(
                "%s: the claim's transaction failed (%s): looking for it in the topic, "
                "then claiming again",
                batch.what,
                exc,
            )
            clients.carried = None
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 2.0)
            continue
        clients.carried = topic.carried_frontier(
            state,
            batch.writer,
            batch.batch_id,
            claim.lower,
            claim.upper,
            batch.avro_data,
            digest_text,
            offset + 1,  # the last record: the commit marker after the statement
        )
        return claim, messages, digest_text
    raise ConcurrentWriterError(
        f"{batch.what}: other writers of the topic kept claiming first "
        f"({CLAIM_ATTEMPTS} attempts). Nothing was written; retry the batch"
    )


def _covering(state: TopicFrontier, first: int, last: int) -> list[Stated]:
    """The statements in ``state`` that meet ``[first, last]``; else the newest, to name."""
    found = stated_covering(state.batches, state.digests, first, last)
    if not found and state.found and state.lower is not None:
        found = [Stated(state.writer or "unknown", state.batch, state.lower, state.upper, None)]
    return found
