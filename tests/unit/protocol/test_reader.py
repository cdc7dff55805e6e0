"""Pure tests of the protocol core: consolidation, progress statements and the reader."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_emitter import (
    BadInputError,
    CdcError,
    CdcReader,
    Progress,
    Update,
    consolidate,
    progress_for,
    progress_from_counts,
)

# The reference example of the format documentation: rows (id, price).
REFERENCE_MESSAGES = [
    [Update((5, 10), 5, 1)],
    [Update((5, 12), 4, 1)],
    [Update((5, 12), 5, -1)],
    [Update((5, 10), 6, -1)],
    Progress((0,), (3,), ()),
    Progress((3,), (10,), ((4, 1), (5, 2), (6, 1))),
]


def run(reader, messages):
    finished = []
    for message in messages:
        for updates, frontier in reader.push(message):
            finished.append((updates, frontier))
    return finished


def collection_at(updates, time):
    counts = {}
    for data, t, diff in updates:
        if t <= time:
            counts[data] = counts.get(data, 0) + diff
    return {d: c for d, c in counts.items() if c}


# -- consolidate and progress ---------------------------------------------------------------


def test_consolidate_sums_drops_zero_and_sorts_by_time():
    updates = [
        Update("a", 2, 1),
        Update("b", 1, 1),
        Update("a", 2, 2),
        Update("b", 1, -1),
        Update("c", 0, 1),
    ]
    assert consolidate(updates) == [Update("c", 0, 1), Update("a", 2, 3)]


def test_consolidate_accepts_plain_tuples():
    assert consolidate([("x", 3, 1), ("x", 3, 1)]) == [Update("x", 3, 2)]


@pytest.mark.parametrize(
    "bad, message",
    [
        (Update("a", None, 1), "time must be a non-negative integer, got None"),
        (Update("a", -1, 1), "time -1 is outside 0..2^63-1"),
        (Update("a", 1.5, 1), "time must be a non-negative integer, got 1.5"),
        (Update("a", 1, None), "diff must be an integer, got None"),
    ],
)
def test_consolidate_rejects_bad_times_and_diffs(bad, message):
    with pytest.raises(BadInputError, match=message.replace("^", r"\^").replace(".", r"\.")):
        consolidate([bad])


def test_consolidate_rejects_64_bit_overflow_naming_the_time():
    with pytest.raises(
        BadInputError, match="at time 7: consolidated diff 9223372036854775808 overflows"
    ):
        consolidate([Update("a", 7, 2**62), Update("a", 7, 2**62)])
    # Intermediate sums beyond 64 bits are fine when the final diff fits.
    assert consolidate([Update("a", 7, 2**63 - 1), Update("a", 7, 1), Update("a", 7, -1)]) == [
        Update("a", 7, 2**63 - 1)
    ]


def test_errors_share_one_root():
    assert issubclass(BadInputError, CdcError)


def test_progress_for_counts_distinct_pairs_per_time():
    updates = [Update("a", 4, 1), Update("b", 4, -1), Update("a", 4, 1), Update("a", 6, 2)]
    assert progress_for(updates, 3, 10) == Progress((3,), (10,), ((4, 2), (6, 1)))


def test_progress_for_empty_and_closing_intervals():
    assert progress_for([], 0, 3) == Progress((0,), (3,), ())
    assert progress_for([], 5, 5) == Progress((5,), (5,), ())
    assert progress_for([Update("a", 9, 1)], 5, None) == Progress((5,), (), ((9, 1),))


def test_progress_refuses_counts_outside_the_interval():
    with pytest.raises(
        BadInputError, match=r"time 10 lies outside the progress interval \[3, 10\)"
    ):
        progress_for([Update("a", 10, 1)], 3, 10)
    with pytest.raises(BadInputError, match="inverted"):
        progress_from_counts(5, 4, {})
    with pytest.raises(BadInputError, match=r"time 2 lies outside the progress interval \[3, 10\)"):
        progress_from_counts(3, 10, {4: 1, 2: 1, 11: 1})
    with pytest.raises(
        BadInputError, match=r"time 10 lies outside the progress interval \[3, 10\)"
    ):
        progress_from_counts(3, 10, {12: 1, 4: 1, 10: 2, 11: 1})
    with pytest.raises(BadInputError, match="count for time 4 is negative: -1"):
        progress_from_counts(3, 10, {5: 1, 4: -1})


def test_progress_lists_the_counts_in_time_order_without_zeros():
    assert progress_from_counts(3, None, {9: 2, 4: 0, 3: 1, 100: 7}) == Progress(
        (3,), (), ((3, 1), (9, 2), (100, 7))
    )
    assert progress_from_counts(3, 4, {4: 0}) == Progress((3,), (4,), ())


# -- the reader on the reference example ------------------------------------------------------


def test_reference_example():
    reader = CdcReader()
    finished = run(reader, REFERENCE_MESSAGES)
    assert reader.frontier == (10,)
    assert reader.violations == []
    history = [u for updates, _ in finished for u in updates]
    assert sorted(history) == sorted(
        [
            Update((5, 12), 4, 1),
            Update((5, 10), 5, 1),
            Update((5, 12), 5, -1),
            Update((5, 10), 6, -1),
        ]
    )
    assert collection_at(history, 4) == {(5, 12): 1}
    assert collection_at(history, 5) == {(5, 10): 1}
    assert collection_at(history, 6) == {}
    assert collection_at(history, 9) == {}
    assert [f for _, f in finished] == [(3,), (10,)]
    assert reader.retained() == 0


def test_reference_example_reversed_and_duplicated():
    reader = CdcReader()
    messages = list(reversed(REFERENCE_MESSAGES)) * 2
    finished = run(reader, messages)
    assert reader.frontier == (10,)
    assert reader.violations == []
    assert len([u for updates, _ in finished for u in updates]) == 4
    assert reader.duplicates == 4


def test_time_waits_for_its_announced_count():
    reader = CdcReader()
    assert reader.push(Progress((0,), (5,), ((2, 2),))) == [([], (2,))]
    assert reader.push([Update("a", 2, 1)]) == []
    assert reader.push([Update("a", 2, 1)]) == []  # a duplicate does not complete the time
    assert reader.push([Update("b", 2, -1)]) == [([Update("a", 2, 1), Update("b", 2, -1)], (5,))]


def test_progress_with_a_gap_waits_until_the_gap_is_filled():
    reader = CdcReader()
    assert reader.push(Progress((3,), (6,), ())) == []
    assert reader.frontier == (0,)
    assert reader.push(Progress((0,), (3,), ())) == [([], (6,))]


def test_closing_progress_ends_the_history():
    reader = CdcReader()
    reader.push([Update("a", 1, 1)])
    assert reader.push(Progress((0,), (), ((1, 1),))) == [([Update("a", 1, 1)], ())]
    assert reader.frontier == ()
    assert reader.push([Update("a", 1, 1)]) == []
    assert reader.retained() == 0


def test_start_frontier():
    reader = CdcReader(start=5)
    assert reader.frontier == (5,)
    reader.push([Update("old", 2, 1)])  # before the start: ignored
    assert reader.push(Progress((5,), (7,), ((6, 1),))) == [([], (6,))]
    assert reader.push([Update("x", 6, 1)]) == [([Update("x", 6, 1)], (7,))]


# -- violations: each is reported, and the stream after it still processes ---------------------


def kinds(reader):
    return [v.kind for v in reader.violations]


def test_conflicting_diff_is_reported_and_the_first_diff_kept():
    reader = CdcReader()
    reader.push([Update("a", 1, 1)])
    reader.push([Update("a", 1, 2)], partition=2, offset=17)
    assert kinds(reader) == ["conflicting_diff"]
    v = reader.violations[0]
    assert (v.time, v.partition, v.offset) == (1, 2, 17)
    assert reader.push(Progress((0,), (2,), ((1, 1),))) == [([Update("a", 1, 1)], (2,))]


def test_over_count_is_reported_and_the_time_still_finishes():
    reader = CdcReader()
    reader.push(Progress((0,), (3,), ((1, 1),)))
    out = reader.push([Update("a", 1, 1), Update("b", 1, 1)])
    assert kinds(reader) == ["over_count"]
    assert reader.violations[0].time == 1
    assert out == [([Update("a", 1, 1), Update("b", 1, 1)], (3,))]


def test_over_count_reports_each_extra_update_across_interleaved_times():
    reader = CdcReader()
    reader.push(Progress((0,), (3,), ((1, 1), (2, 2))))
    out = reader.push(
        [
            Update("a", 1, 1),
            Update("x", 2, 1),
            Update("b", 1, 1),
            Update("c", 1, 1),
            Update("y", 2, 1),
            Update("a", 1, 1),
        ]
    )
    assert kinds(reader) == ["over_count", "over_count"]  # b and c; the repeated a is a duplicate
    assert {v.time for v in reader.violations} == {1}
    assert out == [
        (
            [
                Update("a", 1, 1),
                Update("b", 1, 1),
                Update("c", 1, 1),
                Update("x", 2, 1),
                Update("y", 2, 1),
            ],
            (3,),
        )
    ]
    assert reader.duplicates == 1


def test_pushed_plain_tuples_come_back_as_updates():
    reader = CdcReader()
    out = reader.push([("a", 0, 2)]) + reader.push(Progress((0,), (1,), ((0, 1),)))
    assert out == [([Update("a", 0, 2)], (1,))]
    assert type(out[0][0][0]) is Update


def test_extra_update_after_its_time_was_reported_looks_like_a_duplicate():
    # Bounded memory: nothing is kept about reported times (documented limitation).
    reader = CdcReader()
    reader.push(Progress((0,), (3,), ((1, 1),)))
    reader.push([Update("a", 1, 1)])
    assert reader.push([Update("b", 1, 1)]) == []
    assert reader.violations == []
    assert reader.duplicates == 1


def test_over_count_found_when_the_count_arrives_late():
    reader = CdcReader()
    reader.push([Update("a", 1, 1), Update("b", 1, 1)])
    finished = reader.push(Progress((0,), (3,), ((1, 1),)))
    assert kinds(reader) == ["over_count"]
    assert finished[0][1] == (3,)
    assert len(finished[0][0]) == 2
    # the stream goes on
    assert reader.push(Progress((3,), (4,), ())) == [([], (4,))]


def test_disagreeing_progress_counts():
    reader = CdcReader()
    reader.push(Progress((0,), (5,), ((2, 1),)))
    reader.push(Progress((0,), (5,), ((2, 3),)))
    assert kinds(reader) == ["count_mismatch"]
    assert reader.violations[0].time == 2
    reader.push([Update("a", 2, 1)])
    assert reader.frontier == (5,)


def test_disagreeing_progress_unlisted_time_counts_as_zero():
    reader = CdcReader()
    reader.push(Progress((0,), (5,), ((2, 1),)))
    reader.push(Progress((0,), (5,), ()))
    assert kinds(reader) == ["count_mismatch"]


def test_agreeing_overlapping_progress_with_other_batching():
    reader = CdcReader()
    reader.push(Progress((0,), (5,), ((2, 1), (4, 1))))
    reader.push(Progress((2,), (8,), ((2, 1), (4, 1), (6, 1))))
    reader.push(Progress((0,), (3,), ((2, 1),)))
    assert reader.violations == []
    run(reader, [[Update("a", 2, 1), Update("b", 4, 1), Update("c", 6, 1)]])
    assert reader.frontier == (8,)


def test_count_outside_interval_negative_count_and_time():
    reader = CdcReader()
    reader.push(Progress((0,), (5,), ((7, 1), (2, -1), (-1, 1))))
    reader.push([Update("a", -3, 1), Update("z", 1, 0)])
    assert kinds(reader) == [
        "count_outside_interval",
        "negative_count",
        "negative_time",
        "negative_time",
        "zero_diff",
    ]
    assert reader.frontier == (5,)  # the valid rest of the statement still counts


def test_malformed_progress_is_reported_not_raised():
    reader = CdcReader()
    reader.push(Progress((5,), (3,), ()))
    reader.push(Progress((), (3,), ()))
    reader.push(Progress((0, 1), (3,), ()))
    assert kinds(reader) == ["malformed_progress"] * 3
    assert reader.push(Progress((0,), (1,), ())) == [([], (1,))]


# -- memory ------------------------------------------------------------------------------------


@pytest.mark.slow  # a million-entry workload: the full run, not --quick
def test_memory_stays_bounded_over_a_million_updates():
    reader = CdcReader()
    per_time = 1000
    peak = 0
    reported = 0
    for t in range(1000):
        batch = [Update(i, t, 1) for i in range(per_time)]
        # the updates arrive before their progress statement, and a duplicate after it
        reader.push(batch[: per_time // 2])
        reader.push(batch[per_time // 2 :])
        peak = max(peak, reader.retained())
        for updates, _ in reader.push(Progress((t,), (t + 1,), ((t, per_time),))):
            reported += len(updates)
        reader.push(batch[:10])
    assert reported == 1_000_000
    assert reader.frontier == (1000,)
    assert reader.violations == []
    assert peak <= per_time + 5  # one open time's updates, never the history
    assert reader.retained() == 0


# -- the statement ledger: every statement against every other -------------------------------


def test_a_disagreeing_statement_after_its_time_was_reported_is_a_count_mismatch():
    reader = CdcReader()
    reader.push(Progress((0,), (2,), ((1, 1),)))
    assert reader.push([Update("a", 1, 1)]) == [([Update("a", 1, 1)], (2,))]
    reader.push(Progress((0,), (2,), ((1, 2),)))  # what a re-run with other data leaves behind
    assert [(v.kind, v.time) for v in reader.violations] == [("count_mismatch", 1)]
    assert "1 and 2" in reader.violations[0].detail


def test_a_statement_claiming_an_empty_time_the_chain_counted_is_a_count_mismatch():
    reader = CdcReader()
    run(reader, [Progress((0,), (3,), ((0, 1),)), [Update("a", 0, 1)]])
    reader.push(Progress((0,), (5,), ((4, 1),)))  # says time 0 is empty
    assert [(v.kind, v.time) for v in reader.violations] == [("count_mismatch", 0)]


def test_a_queued_statement_is_checked_when_it_arrives_not_when_it_grafts():
    reader = CdcReader()
    reader.push(Progress((5,), (7,), ((6, 1),)))  # cannot graft yet (gap [0, 5))
    reader.push(Progress((5,), (7,), ((6, 2),)))
    assert [(v.kind, v.time) for v in reader.violations] == [("count_mismatch", 6)]
    assert reader.pending().gap == (0, 5)


def test_statements_read_ahead_of_the_frontier_wait_and_graft_in_one_pass():
    # a partition read far ahead of the others: every statement but the first arrives before the
    # frontier reaches it. Each leaves the waiting heap once (it was a scan of all of them per
    # message: 20,000 such statements took seconds; now they take milliseconds)
    n = 20_000
    reader = CdcReader()
    for t in reversed(range(1, n)):
        assert reader.push(Progress((t,), (t + 1,), ((t, 1),))) == []
        assert reader.push([Update(f"row {t}", t, 1)]) == []
    assert reader.pending().gap == (0, 1) and reader.frontier == (0,)
    finished = reader.push(Progress((0,), (1,), ()))
    assert len(finished) == 1 and finished[0][1] == (n,)
    assert sorted(u.time for u in finished[0][0]) == list(range(1, n))
    assert reader.violations == [] and reader.pending().empty


def test_statements_that_graft_together_graft_in_their_order_of_arrival():
    # [4, 10) arrives before [3, 8), both waiting for [0, 5); they disagree at 6. Both graft
    # when [0, 5) arrives, the first to arrive first: time 6 takes its count (2), not the
    # count of the statement with the lower lower bound (1)
    reader = CdcReader()
    reader.push(Progress((4,), (10,), ((6, 2),)))
    reader.push(Progress((3,), (8,), ((6, 1),)))
    assert [(v.kind, v.time) for v in reader.violations] == [("count_mismatch", 6)]
    reader.push([Update("a", 6, 1)])
    reader.push(Progress((0,), (5,), ()))
    assert reader.frontier == (6,)  # time 6 has 1 of its 2 updates
    finished = reader.push([Update("b", 6, 1)])
    assert finished[0][1] == (10,) and sorted(u.data for u in finished[0][0]) == ["a", "b"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-50, 50), st.integers(1, 9)), max_size=80, unique_by=lambda tc: tc[0]
    ),
    st.lists(st.tuples(st.integers(-60, 60), st.integers(-60, 60)), max_size=10),
)
def test_sorted_counts_keeps_times_in_order_whatever_order_they_come_in(items, ranges):
    from cdc_emitter.protocol import SortedCounts

    counts = SortedCounts(load=2)  # chunks of at most 4 times: every insert near a split
    for time, count in items:
        counts.insert(time, count)
    expected = dict(items)
    assert len(counts) == len(expected)
    for time in range(-55, 56):
        assert counts.get(time) == expected.get(time)
    assert counts.between(-100, 100) == sorted(expected.items())
    for lower, end in ranges:
        assert counts.between(lower, end) == sorted(
            (t, c) for t, c in expected.items() if lower <= t < end
        )


def test_statement_ledger_merges_intervals_and_keeps_the_first_count():
    from cdc_emitter.protocol import StatementLedger

    ledger = StatementLedger()
    assert ledger.record(0, 3, {1: 2}) == []
    assert ledger.record(5, 8, {6: 1}) == []
    assert ledger.covers(2) and not ledger.covers(3) and not ledger.covers(4)
    assert ledger.record(2, 6, {}) == []  # agrees: nothing counted in [2, 6)
    assert ledger.covers(4) and ledger.record(0, 10, {1: 2, 6: 1}) == []
    assert ledger.record(0, None, {1: 3}) == [(1, 2, 3), (6, 1, 0)]
    assert ledger.count(1) == 2 and ledger.count(9) == 0 and ledger.count(10**9) == 0
    assert len(ledger) == 2 and ledger._starts == [0] and ledger._ends == [2**63]


# -- strict mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("strict", ["exact", "bloom"])
def test_strict_sees_late_updates_that_are_no_duplicates(strict):
    reader = CdcReader(strict=strict)
    run(reader, [Progress((0,), (2,), ((1, 1),)), [Update("a", 1, 1)]])
    reader.push([Update("a", 1, 1), Update("b", 1, 1), Update("a", 1, -1), Update("b", 1, 1)])
    assert [(v.kind, v.time) for v in reader.violations] == [
        ("over_count", 1),
        ("conflicting_diff", 1),
    ]
    assert reader.duplicates == 2  # the exact duplicate, and the second copy of the bad update


def test_strict_ignores_times_below_its_start_frontier():
    reader = CdcReader(5, strict="exact")
    reader.push([Update("a", 3, 1)])
    assert reader.violations == [] and reader.duplicates == 1


def test_strict_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="strict must be None or one of exact, bloom, got 'yes'"):
        CdcReader(strict="yes")


def test_bloom_memory_grows_by_chained_filters():
    from cdc_emitter.protocol.bloom import BloomMemory

    memory = BloomMemory(1e-9, first_capacity=100)  # no false positive to make this flaky
    memory.remember(0, {i: Update(i, 0, 1) for i in range(400)})
    assert memory.keys == 800 and len(memory._filters) == 4  # capacities 100, 200, 400, 800
    assert all(memory.check(i, 0, 1) == 0 for i in range(400))
    assert memory.check(5, 0, 2) == 1


# -- pending: what keeps the frontier where it is ----------------------------------------------


def test_pending_names_stalled_counts_gaps_and_held_updates():
    reader = CdcReader()
    reader.push(Progress((0,), (3,), ((1, 3),)))
    reader.push([Update("a", 1, 1), Update("b", 1, 1), Update("z", 4, 1)])
    reader.push(Progress((6,), (8,), ()))
    pending = reader.pending()
    assert reader.frontier == (1,)
    assert pending.stalled == ((1, 3, 2),)
    assert pending.updates == 3 and pending.times == (1, 4) and reader.held == 3
    assert pending.progress == (3,) and pending.gap == (3, 6) and pending.statements == 2
    assert not pending.empty
    run(reader, [[Update("c", 1, 1)], Progress((3,), (6,), ((4, 1),))])
    assert reader.frontier == (8,) and reader.pending().empty and reader.held == 0


# A claim whose writer died: the statement is in the topic, fewer updates than it counts.
CLAIM_HEADERS = [
    ("cdc-emitter-kind", b"progress"),
    ("cdc-emitter-writer", b"3f2a9c1e-writer"),
    ("cdc-emitter-batch", b"7"),
]


def test_pending_names_the_writer_and_batch_of_a_statement_whose_updates_are_missing():
    from cdc_emitter.protocol import Waiting

    reader = CdcReader()
    reader.push(Progress((0,), (2,), ((1, 1),)), partition=0, offset=0)
    reader.push([Update("a", 1, 1)], partition=1, offset=0)
    reader.push(
        Progress((2,), (5,), ((2, 3), (4, 2))), partition=0, offset=1, headers=CLAIM_HEADERS
    )
    reader.push([Update("b", 2, 1), Update("c", 4, 1)], partition=1, offset=1)
    pending = reader.pending()
    assert reader.frontier == (2,)
    assert pending.waiting == (Waiting("3f2a9c1e-writer", "7", 2, 5, (2, 4), 2, 3, 5, 0, 1),)
    assert pending.to_dict()["waiting"] == [
        {
            "writer": "3f2a9c1e-writer",
            "batch": "7",
            "lower": [2],
            "upper": [5],
            "times": [2, 4],
            "open_times": 2,
            "missing": 3,
            "counted": 5,
            "partition": 0,
            "offset": 1,
        }
    ]
    # the rest arrives: nothing waits, nothing of the statement is kept
    run(reader, [[Update("d", 2, 1), Update("e", 2, 1), Update("f", 4, 1)]])
    assert reader.frontier == (5,) and reader.pending().waiting == ()
    assert reader.pending().empty and reader.retained() == 0


def test_waiting_statements_without_headers_are_named_by_where_they_are():
    reader = CdcReader()
    reader.push(Progress((0,), (), ((0, 2),)), partition=0, offset=4)  # closes the history
    reader.push([Update("a", 0, 1)])
    (waiting,) = reader.pending().waiting
    assert (waiting.writer, waiting.batch, waiting.lower, waiting.upper) == (None, None, 0, None)
    assert (waiting.partition, waiting.offset, waiting.missing, waiting.counted) == (0, 4, 1, 2)


def test_each_waiting_statement_is_listed_once_in_time_order_and_headers_may_be_a_mapping():
    reader = CdcReader()
    # two writers' claims; the later one arrives first and waits in the queue until grafted
    reader.push(
        Progress((3,), (6,), ((4, 1),)),
        headers={"cdc-emitter-writer": "w2", "cdc-emitter-batch": "0"},
    )
    reader.push(Progress((0,), (3,), ((1, 1), (2, 1))), headers={"cdc-emitter-writer": b"w1"})
    pending = reader.pending()
    assert [(w.writer, w.batch, w.times, w.missing, w.counted) for w in pending.waiting] == [
        ("w1", None, (1, 2), 2, 2),
        ("w2", "0", (4,), 1, 1),
    ]
    assert [t for t, _count, _received in pending.stalled] == [1, 2, 4]


def test_a_statement_counting_many_times_lists_twenty_and_says_how_many():
    reader = CdcReader()
    reader.push(Progress((0,), (100,), tuple((t, 1) for t in range(100))), headers=CLAIM_HEADERS)
    (waiting,) = reader.pending().waiting
    assert waiting.times == tuple(range(20)) and waiting.open_times == 100
    assert waiting.missing == waiting.counted == 100


def test_the_counting_reader_names_waiting_statements_as_the_reader_does():
    from cdc_emitter.protocol import CountingReader, TimeCounts

    reader, counting = CdcReader(), CountingReader()
    statement = Progress((0,), (3,), ((1, 2),))
    reader.push(statement, partition=0, offset=0, headers=CLAIM_HEADERS)
    counting.push(statement, partition=0, offset=0, headers=CLAIM_HEADERS)
    reader.push([Update("a", 1, 1)], partition=0, offset=1)
    counting.push_counts([TimeCounts(1, 1)], received=1, partition=0, offset=1)
    assert counting.pending() == reader.pending()
    assert counting.pending().waiting[0].missing == 1


def test_the_verify_text_says_who_claimed_what_and_what_is_missing():
    from cdc_emitter.cli.output import LISTED_PER_KIND, pending_lines, waiting_line
    from cdc_emitter.protocol import Waiting

    assert waiting_line(Waiting("w1", "7", 2, 5, (2, 4), 2, 3, 5, 0, 1)) == (
        "pending: writer w1 batch 7 claimed [2, 5) (partition 0, offset 1): 3 of 5 counted "
        "updates missing at times 2, 4"
    )
    assert waiting_line(Waiting("w1", None, 2, None, (2,), 1, 1, 4, None, None)) == (
        "pending: writer w1 claimed [2, ∞): 1 of 4 counted updates missing at time 2"
    )
    many = Waiting(None, None, 0, 100, tuple(range(20)), 100, 100, 100, 0, 9)
    assert waiting_line(many) == (
        "pending: an unnamed writer claimed [0, 100) (partition 0, offset 9): 100 of 100 counted "
        "updates missing at times 0, 1, 2, 3, 4 and 95 more"
    )
    reader = CdcReader()
    for k in range(LISTED_PER_KIND + 3):
        reader.push(
            Progress((k,), (k + 1,), ((k, 1),)),
            headers={"cdc-emitter-writer": f"w{k}", "cdc-emitter-batch": str(k)},
        )
    lines = [line for line in pending_lines(reader.pending(), reader.frontier) if "claimed" in line]
    assert len(lines) == LISTED_PER_KIND
    assert lines[0].startswith("pending: writer w0 batch 0 claimed [0, 1)")
    assert pending_lines(reader.pending(), reader.frontier)[-1] == (
        "pending: ... and 3 more statements waiting for their updates (--json lists them all)"
    )


def test_canonical_nan_makes_nan_rows_equal():
    from cdc_emitter.protocol import NAN, canonical_nan

    a, b = (
        canonical_nan((1, float("nan"), (float("nan"),))),
        canonical_nan((1, float("nan"), (float("nan"),))),
    )
    assert a == b and hash(a) == hash(b) and a[1] is NAN
    reader = CdcReader()
    run(reader, [[Update(a, 0, 1)], [Update(b, 0, 1)], [Update(b, 0, -1)]])
    assert [v.kind for v in reader.violations] == ["conflicting_diff"] and reader.duplicates == 1


def test_split_progress_tiles_the_interval_with_statements_of_at_most_n_times():
    from cdc_emitter.protocol import Progress, split_progress

    whole = progress_from_counts(0, 20, {4: 1, 6: 2, 9: 1, 12: 5, 15: 1})
    parts = split_progress(whole, 2)
    assert parts == [
        Progress((0,), (9,), ((4, 1), (6, 2))),
        Progress((9,), (15,), ((9, 1), (12, 5))),
        Progress((15,), (20,), ((15, 1),)),
    ]
    assert split_progress(whole, 5) == [whole]
    closed = split_progress(progress_from_counts(0, None, {1: 1, 2: 1}), 1)
    assert closed == [Progress((0,), (2,), ((1, 1),)), Progress((2,), (), ((2, 1),))]
    # a reader grafts them one after another onto the same frontier as the whole statement
    reader = CdcReader()
    for part in parts:
        list(reader.push(part))
    list(
        reader.push(
            [Update("a", t, 1) for t, n in whole.counts]
            + [Update(("b", i), t, 1) for t, n in whole.counts for i in range(n - 1)]
        )
    )
    assert reader.frontier == (20,) and reader.violations == []
    with pytest.raises(ValueError, match="max_times must be at least 1, not 0"):
        split_progress(whole, 0)
