"""Where a batch's claim goes, given what other writers committed (pure: no Spark, no Kafka)."""

from __future__ import annotations

import pytest

from cdc_emitter.errors import BadInputError, ConcurrentWriterError, ReplayError
from cdc_emitter.sink.claim import Stated, decide_claim, stated_covering
from cdc_emitter.sink.digest import format_digest
from cdc_emitter.sink.interval import batch_upper, check_upper


def stated(
    writer: str, batch: int, lower: int, upper: int | None, xor: int, counts: dict
) -> Stated:
    return Stated(writer, batch, lower, upper, format_digest(xor, counts))


def decide(**kw):
    args = dict(
        what="topic 't' batch 3",
        writer="me",
        batch_id=3,
        lower=10,
        upper=13,
        frontier=10,
        own=None,
        counts={10: 2, 12: 1},
        digest=(77, ((10, 2), (12, 1))),
        covering=[],
        redundant=False,
    )
    args.update(kw)
    return decide_claim(**args)


def test_a_batch_whose_frontier_did_not_move_claims_its_interval():
    claim = decide()
    assert (claim.kind, claim.lower, claim.upper) == ("new", 10, 13)


def test_a_batch_overtaken_by_another_writer_writes_after_it_when_its_times_allow():
    claim = decide(frontier=11, counts={12: 1}, digest=(5, ((12, 1),)))
    assert (claim.kind, claim.lower, claim.upper) == ("new", 11, 13)


def test_a_batch_whose_times_another_writer_claimed_fails_naming_that_writer_and_batch():
    theirs = stated("other", 8, 10, 12, 9, {10: 4})
    with pytest.raises(ConcurrentWriterError) as err:
        decide(frontier=12, covering=[theirs])
    text = str(err.value)
    assert "writer other batch 8 [10, 12)" in text
    assert "Nothing was written" in text
    assert "from time 10" in text


def test_a_redundant_batch_equal_to_the_statements_there_writes_duplicates():
    covering = [stated("twin", 3, 10, 12, 70, {10: 2}), stated("twin", 4, 12, 13, 77 ^ 70, {12: 1})]
    claim = decide(frontier=20, covering=covering, redundant=True)
    assert (claim.kind, claim.lower, claim.upper) == ("redundant", 10, 13)
    assert claim.others == tuple(covering)


@pytest.mark.parametrize(
    "covering",
    [
        [stated("twin", 3, 10, 13, 77, {10: 2, 12: 2})],  # other counts
        [stated("twin", 3, 10, 13, 78, {10: 2, 12: 1})],  # other rows (digest)
        [stated("twin", 3, 10, 15, 77 ^ 5, {10: 2, 12: 1, 14: 1})],  # batches do not align
        [stated("twin", 3, 11, 13, 77, {12: 1})],  # a time no statement found
    ],
)
def test_a_redundant_batch_that_differs_from_the_statements_is_refused(covering):
    with pytest.raises(ConcurrentWriterError, match="not redundant with that writer"):
        decide(frontier=20, covering=covering, redundant=True)


def test_a_redundant_batch_beyond_the_frontier_claims_like_any():
    claim = decide(frontier=10, redundant=True)
    assert claim.kind == "new"


def test_a_rerun_finds_its_own_claim_and_writes_its_updates_again():
    own = stated("me", 3, 10, 13, 77, {10: 2, 12: 1})
    claim = decide(frontier=40, own=own)
    assert (claim.kind, claim.lower, claim.upper) == ("own", 10, 13)


def test_a_rerun_with_other_data_than_its_claim_is_refused_before_writing():
    own = stated("me", 3, 10, 13, 78, {10: 2, 12: 1})
    with pytest.raises(ReplayError, match="Nothing was written"):
        decide(frontier=40, own=own)


def test_a_closed_topic_takes_no_claim():
    with pytest.raises(ConcurrentWriterError, match="closed"):
        decide(frontier=None)


def test_an_empty_batch_another_writer_went_past_states_nothing_new():
    claim = decide(frontier=20, counts={}, digest=(0, ()), upper=11)
    assert (claim.kind, claim.lower, claim.upper) == ("new", 20, 20)


def test_stated_covering_finds_the_statements_that_meet_the_times_in_order():
    batches = {("a", 1): (0, 5), ("b", 7): (5, 9), ("a", 2): (9, 12), ("c", 1): (12, None)}
    digests = {("b", 7): "d"}
    found = stated_covering(batches, digests, 6, 10)
    assert [(s.writer, s.batch, s.digest) for s in found] == [("b", 7, "d"), ("a", 2, None)]


def test_an_interval_beyond_the_largest_long_is_refused_unless_it_closes_the_history():
    check_upper("b", 2**63 - 1)
    closing = dict(lower=0, recorded=None, column_mode=False, max_time=None, upper_hint=None)
    assert batch_upper(what="b", close=True, time=2**63 - 1, **closing) is None
    with pytest.raises(BadInputError, match="time 9223372036854775807"):
        batch_upper(what="b", close=False, time=2**63 - 1, **closing)
    with pytest.raises(BadInputError, match="time 9223372036854775807.*close=True"):
        check_upper("b", 2**63)


def test_a_redundant_batch_behind_a_frontier_it_was_decided_from_is_compared_not_claimed():
    """Decided from frontier 13 with updates at time 10 (a twin ahead of it): the frontier did
    not move, but its times are stated already — compared, never claimed as [13, 13)."""
    covering = [stated("twin", 3, 10, 11, 77, {10: 2})]
    claim = decide(
        lower=13,
        upper=13,
        frontier=13,
        counts={10: 2},
        digest=(77, ((10, 2),)),
        covering=covering,
        redundant=True,
    )
    assert (claim.kind, claim.lower, claim.upper) == ("redundant", 10, 11)
