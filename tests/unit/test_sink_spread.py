"""How the JVM path sizes a batch's spread from the last batch's bytes (pure: no Spark)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdc_emitter.sink_executors import BUCKET_BYTES, FANOUT_ARRAYS, spread

LIMIT = 900_000


def test_a_batch_of_nothing_goes_to_one_array():
    assert spread(0, LIMIT, 200) == (1, 1)


def test_buckets_follow_the_bytes_not_the_shuffle_partitions():
    # 80 MB: 356 arrays of a quarter of the limit need 6 buckets, whether the session has 4 or
    # 200 shuffle partitions (200 tasks of tiny arrays was what a new session paid)
    assert spread(80_000_000, LIMIT, 4) == spread(80_000_000, LIMIT, 200) == (6, 60)
    # with arrays to spare, a bucket packs about BUCKET_BYTES, up to the shuffle partitions
    assert spread(40 * BUCKET_BYTES, 100 * LIMIT, 200) == (40, 1)
    assert spread(40 * BUCKET_BYTES, 100 * LIMIT, 8) == (8, 4)


@given(st.integers(0, 10**12), st.integers(1_000, 10**7), st.integers(1, 1000))
def test_the_arrays_hold_four_times_the_bytes(n_bytes, limit, partitions):
    buckets, fanout = spread(n_bytes, limit, partitions)
    assert 1 <= fanout <= FANOUT_ARRAYS and buckets >= 1
    assert buckets * fanout * limit >= 4 * n_bytes
    assert (buckets - 1) * FANOUT_ARRAYS * limit < 4 * n_bytes or buckets <= partitions or buckets == 1
