"""A small batch finished on the driver, pure: Spark's hash, the row checks, consolidation on
encoded bytes (exact sums, zeros dropped, oversized updates), the digest."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from cdc_emitter.errors import BadInputError, LateUpdateError
from cdc_emitter.protocol import MAX_LONG, MIN_LONG
from cdc_emitter.protocol.varint import encode_zigzag_long
from cdc_emitter.sink.small_batch import check_rows, consolidate, spark_xxhash64_long

# xxhash64(v) of a long column in Spark 4.1 (seed 42): SELECT xxhash64(v)
SPARK_XXHASH64 = {
    0: -5252525462095825812,
    1: -7001672635703045582,
    -1: 3858142552250413010,
    42: -6876166290308861218,
    2**63 - 1: -3246596055638297850,
    -(2**63): -8619748838626508300,
    123456789012345: 755925937788029102,
}


def test_the_hash_of_a_long_is_sparks():
    values = np.array(list(SPARK_XXHASH64), np.int64)
    got = spark_xxhash64_long(values, np.full(len(values), 42, np.int64))
    assert dict(zip(SPARK_XXHASH64, got.tolist())) == SPARK_XXHASH64


def rows_text(i: int) -> str:
    return json.dumps({"row": i})


def checked(times, diffs=None, **kw):
    args = dict(
        what="topic 'x' batch 3",
        time_column="t",
        diff_column="diff",
        lower=5,
        late_advance=False,
        rerun_upper=None,
        describe=rows_text,
    )
    return check_rows(
        pa.array(times, pa.int64()),
        None if diffs is None else pa.array(diffs, pa.int64()),
        **{**args, **kw},
    )


def test_rows_pass_with_their_times_and_diffs():
    t, d = checked([5, 7, 6], [1, -2, 3])
    assert t.tolist() == [5, 7, 6] and d.tolist() == [1, -2, 3]
    t, d = checked([5, 5])  # no diff column: each row adds one
    assert d.tolist() == [1, 1]


@pytest.mark.parametrize(
    ("times", "diffs", "kw", "error", "message"),
    [
        (
            [5, None],
            [1, 1],
            {},
            BadInputError,
            """topic 'x' batch 3: null time in column 't' (e.g. row {"row": 1}); every row needs a """
            "non-negative integer time",
        ),
        (
            [5, -1],
            [1, 1],
            {},
            BadInputError,
            """topic 'x' batch 3: negative time -1 in column 't' (e.g. row {"row": 1}); times must be non-negative""",
        ),
        (
            [5, 4],
            [1, 1],
            {},
            LateUpdateError,
            """topic 'x' batch 3: update at time 4 in column 't' is late (e.g. row {"row": 1}): the topic is """
            "complete up to frontier 5; pass late='advance' to move late updates to 5",
        ),
        (
            [5, 6],
            [None, 1],
            {},
            BadInputError,
            """topic 'x' batch 3: null diff in column 'diff' (e.g. row {"row": 0})""",
        ),
        (
            [5, 9],
            [1, 1],
            {"rerun_upper": 8},
            BadInputError,
            "topic 'x' batch 3 is a re-run whose recorded interval is [5, 8), but now has an update at time 9: "
            "the batch's input changed between attempts (a streaming source must replay the same data)",
        ),
    ],
)
def test_a_bad_row_fails_the_batch_naming_it(times, diffs, kw, error, message):
    with pytest.raises(error) as info:
        checked(times, diffs, **kw)
    assert str(info.value) == message


def test_late_times_advance_to_the_frontier_when_asked():
    t, _ = checked([2, 9], [1, 1], late_advance=True)
    assert t.tolist() == [5, 9]


def batch_of(rows, data_type=None, **kw):
    """rows: (data bytes, data hash, time, diff)"""
    data, hashes, times, diffs = zip(*rows)
    args = dict(what="topic 'x'", max_item_bytes=1000, max_message_bytes=1032, describe=rows_text)
    return consolidate(
        pa.array(data, data_type or pa.binary()),
        np.array(hashes, np.int64),
        np.array(times, np.int64),
        np.array(diffs, np.int64),
        **{**args, **kw},
    )


def item(data: bytes, time: int, diff: int) -> bytes:
    return data + encode_zigzag_long(time) + encode_zigzag_long(diff)


def test_equal_rows_at_one_time_sum_and_zero_sums_vanish():
    batch = batch_of(
        [(b"a", 11, 5, 1), (b"b", 22, 5, 2), (b"a", 11, 5, 3), (b"b", 22, 5, -2), (b"a", 11, 6, 1)]
    )
    assert sorted(batch.items) == sorted([item(b"a", 5, 4), item(b"a", 6, 1)])
    assert batch.counts == {5: 1, 6: 1}
    assert batch.max_time == 6
    # Spark's xxhash64(xxhash64(data columns, time), diff), the data columns' hash being 11
    inner = spark_xxhash64_long(np.array([5, 6], np.int64), np.array([11, 11], np.int64))
    expected = spark_xxhash64_long(
        np.array([4, 1], np.int64), spark_xxhash64_long(inner, np.array([42, 42], np.int64))
    )
    assert batch.digest == int(expected[0] ^ expected[1])


@pytest.mark.parametrize("data_type", [pa.binary(), pa.large_binary()])  # Connect's Arrow: large
def test_updates_of_many_times_encode_each_time_and_diff(data_type):
    # every varint length of a time, negative and large diffs: the records as the codec writes them
    times = [0, 63, 64, 8191, 8192, 2**40, MAX_LONG]
    rows = [
        (bytes([65 + k]), k, time, diff)
        for k, (time, diff) in enumerate(zip(times, [1, -1, 2, -64, 65, MIN_LONG, MAX_LONG]))
    ]
    batch = batch_of(rows, data_type)
    assert sorted(batch.items) == sorted(item(data, time, diff) for data, _h, time, diff in rows)
    assert list(batch.counts.items()) == [(t, 1) for t in times]


def test_everything_cancelled_keeps_the_largest_time():
    batch = batch_of([(b"a", 1, 7, 1), (b"a", 1, 7, -1)])
    assert (batch.items, batch.counts, batch.digest, batch.max_time) == ([], {}, 0, 7)


def test_a_sum_that_overflows_on_the_way_but_fits_is_exact():
    batch = batch_of([(b"a", 1, 5, MAX_LONG), (b"a", 1, 5, 1), (b"a", 1, 5, -2)])
    assert batch.items == [item(b"a", 5, MAX_LONG - 1)]


def test_a_sum_that_does_not_fit_names_the_row():
    with pytest.raises(BadInputError) as info:
        batch_of([(b"z", 1, 5, 1), (b"a", 2, 5, MAX_LONG), (b"a", 2, 5, 1)])
    assert str(info.value) == (
        """topic 'x': the consolidated diff of row {"row": 1} at time 5 is """
        f"{MAX_LONG + 1}, which overflows a 64-bit long"
    )


def test_an_update_too_big_for_a_message_names_the_row():
    with pytest.raises(BadInputError) as info:
        batch_of([(b"s", 1, 5, 1), (b"x" * 1000, 2, 5, 1)])
    assert str(info.value) == (
        """topic 'x': row {"row": 1} at time 5 encodes to 1002 bytes, over the """
        "message limit of 1032 bytes less 32 for the message envelope "
        "(max_message_bytes)"
    )


def test_an_empty_batch():
    batch = consolidate(
        pa.array([], pa.binary()),
        np.array([], np.int64),
        np.array([], np.int64),
        np.array([], np.int64),
        what="w",
        max_item_bytes=10,
        max_message_bytes=42,
        describe=rows_text,
    )
    assert (batch.items, batch.counts, batch.digest, batch.max_time) == ([], {}, 0, None)
