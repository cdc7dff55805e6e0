"""plan_versions: a converter writes each source version once, whole, and never closes one early."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_emitter.convert.plan import OpenVersion, VersionPlan, plan_versions
from cdc_emitter.errors import CdcError

TABLE = {3: 4, 4: 1, 6: 5}  # change rows per version (5: no change rows, e.g. OPTIMIZE)


def count(version: int) -> int:
    return TABLE[version]


def test_whole_versions_in_one_batch_are_written_from_the_batch():
    assert plan_versions({3: 4, 4: 1}, None, count) == VersionPlan((3, 4), None, None)


def test_a_newest_version_split_over_batches_is_held_then_read_whole_from_the_table():
    first = plan_versions({3: 4, 6: 2}, None, count)
    assert first == VersionPlan((3,), None, OpenVersion(6, 2))
    middle = plan_versions({6: 2}, first.held, count)
    assert middle == VersionPlan((), None, OpenVersion(6, 4)) and not middle.writes
    last = plan_versions({6: 1}, middle.held, count)
    assert last == VersionPlan((), 6, None)


def test_a_held_version_is_complete_once_the_stream_moves_past_it():
    assert plan_versions({6: 5}, OpenVersion(4, 1), count) == VersionPlan((6,), 4, None)


def test_an_empty_batch_keeps_what_was_held():
    assert plan_versions({}, OpenVersion(6, 2), count) == VersionPlan((), None, OpenVersion(6, 2))


def test_a_version_before_a_held_one_or_more_rows_than_the_table_has_is_an_error():
    with pytest.raises(
        CdcError, match="delivered version 3 after version 6, which an earlier batch held open"
    ):
        plan_versions({3: 1, 6: 1}, OpenVersion(6, 2), count, where="delta table t")
    with pytest.raises(
        CdcError,
        match=r"^delta table t: version 4 has 1 change rows in the table but the "
        r"stream delivered 2; .*VACUUM",
    ):
        plan_versions({4: 2}, None, count, where="delta table t")


@st.composite
def split_feeds(draw):
    """A table's versions (some without change rows) and its change rows cut into batches."""
    versions = draw(st.lists(st.integers(0, 6), min_size=1, max_size=8))
    table = {}
    at = 0
    for rows in versions:
        if rows:
            table[at] = rows
        at += draw(st.integers(1, 3))
    stream = [v for v in sorted(table) for _ in range(table[v])]
    if not stream:
        return table, []
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=len(stream))))
    bounds = [0, *[c for c in cuts if c < len(stream)], len(stream)]
    return table, [stream[a:b] for a, b in zip(bounds, bounds[1:]) if a < b]


@settings(max_examples=500, deadline=None)
@given(split_feeds())
def test_every_version_is_written_exactly_once_whole_in_order_and_nothing_stays_held(feed):
    table, batches = feed
    written: list[int] = []
    held = None
    for batch in batches:
        counts = Counter(batch)
        plan = plan_versions(counts, held, table.__getitem__)
        for v in plan.from_batch:
            assert counts[v] == table[v]  # written from the batch only when it holds all rows
        order = sorted([*plan.from_batch, *([plan.reread] if plan.reread is not None else [])])
        assert not written or not order or order[0] > written[-1]  # never a version twice or late
        written += order
        if plan.held is not None:
            assert plan.held.version == max(counts) and plan.held.seen < table[plan.held.version]
        held = plan.held
    assert written == sorted(table)  # every version with change rows, once, once all rows arrived
    assert held is None


def test_a_plan_record_round_trips_and_a_bad_one_is_named():
    from cdc_emitter.convert.plan import PlanRecord

    record = PlanRecord(7, VersionPlan((3, 4), 2, OpenVersion(6, 2)))
    assert PlanRecord.from_lines(record.to_json().splitlines(), "x") == record
    assert PlanRecord.from_lines(
        PlanRecord(0, VersionPlan((), None, None)).to_json().splitlines(), "x"
    ) == PlanRecord(0, VersionPlan((), None, None))
    with pytest.raises(
        CdcError, match="converter log record ckpt/cdc-emitter-convert/7 is unreadable"
    ):
        PlanRecord.from_lines(['{"batch_id": 7}'], "ckpt/cdc-emitter-convert/7")


def test_the_watermark_is_the_smallest_resolved_time_over_every_partition():
    from cdc_emitter.convert.watermark import watermark_window

    # partition 1 has no resolved message yet: nothing is complete
    resolved, lower, upper, start, end = watermark_window(
        None, [0, 1], {0: 0, 1: 0}, {0: 5, 1: 3}, {0: 40}
    )
    assert (resolved, lower, upper, start, end) == ({0: 40}, 0, 0, {0: 0, 1: 0}, {0: 5, 1: 3})


def test_the_next_window_starts_at_the_pending_offsets_and_never_moves_the_watermark_back():
    from cdc_emitter.convert.watermark import WatermarkRecord, watermark_window

    previous = WatermarkRecord(4, {0: 40, 1: 30}, 10, 30, {0: 0, 1: 0}, {0: 5, 1: 3}, {0: 2, 1: 3})
    resolved, lower, upper, start, end = watermark_window(
        previous, [0, 1, 2], {1: 3, 2: 0}, {1: 9, 2: 4}, {1: 50, 2: 45}
    )
    assert resolved == {0: 40, 1: 50, 2: 45}
    assert (lower, upper) == (30, 40)
    assert start == {0: 2, 1: 3, 2: 0}  # pending offsets; a partition seen first: its first offset
    assert end == {0: 5, 1: 9, 2: 4}
    # an older resolved message (a replay) keeps the newer one
    again = WatermarkRecord(5, resolved, lower, upper, start, end, start)
    assert watermark_window(again, [0, 1, 2], {0: 5}, {0: 6}, {0: 12})[0:3] == (
        {0: 40, 1: 50, 2: 45},
        40,
        40,
    )


def test_a_watermark_record_round_trips_and_a_bad_one_is_named():
    from cdc_emitter.convert.watermark import WatermarkRecord

    record = WatermarkRecord(3, {0: 40, 1: 30}, 10, 30, {0: 0, 1: 0}, {0: 5, 1: 3}, {0: 2, 1: 3})
    assert WatermarkRecord.from_lines(record.to_json().splitlines(), "x") == record
    with pytest.raises(
        CdcError, match="converter log record ck/cdc-emitter-convert/3 is unreadable"
    ):
        WatermarkRecord.from_lines(['{"batch_id": 3, "resolved": []}'], "ck/cdc-emitter-convert/3")
