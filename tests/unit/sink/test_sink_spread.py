"""How the JVM path sizes a batch's spread from the last batch's bytes, and how many groups its
packing holds in a task (pure: no Spark)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdc_emitter.sink.distributed import BUCKET_BYTES, FANOUT_ARRAYS, spread
from cdc_emitter.sink.plan import packed_groups
from cdc_emitter.spark.settings import FALLBACK_THRESHOLD, GroupsInMemory

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
    assert (
        (buckets - 1) * FANOUT_ARRAYS * limit < 4 * n_bytes or buckets <= partitions or buckets == 1
    )


class FakeConf:
    """A session's settings as ``spark.conf`` shows them: its own values, over Spark's defaults."""

    DEFAULTS = {FALLBACK_THRESHOLD: "128"}

    def __init__(self, **own: str) -> None:
        self.own = dict(own)
        self.calls: list[tuple] = []

    def get(self, key, *default):
        return self.own.get(key, default[0] if default else self.DEFAULTS[key])

    def set(self, key, value):
        self.calls.append(("set", key, value))
        self.own[key] = value

    def unset(self, key):
        self.calls.append(("unset", key))
        self.own.pop(key, None)


class FakeSession:
    def __init__(self, **own: str) -> None:
        self.conf = FakeConf(**own)


def test_packing_where_the_rows_are_holds_every_array_and_each_buckets_cancelled_group():
    assert packed_groups(8, FANOUT_ARRAYS) == 8 * 65
    assert packed_groups(1, 0) == 2  # a spread of nothing still has its one array


def test_the_groups_setting_is_raised_while_needed_and_put_back_as_the_user_left_it():
    unset = FakeSession()
    held = GroupsInMemory(unset)
    held.at_least(520)
    held.at_least(130)  # lower than what is in force: nothing more
    assert unset.conf.own == {FALLBACK_THRESHOLD: "520"}
    held.restore()
    assert unset.conf.own == {} and unset.conf.calls[-1] == ("unset", FALLBACK_THRESHOLD)

    lower = FakeSession(**{FALLBACK_THRESHOLD: "200"})
    held = GroupsInMemory(lower)
    held.at_least(520)
    held.at_least(1040)  # a batch spread again over more arrays
    assert lower.conf.own[FALLBACK_THRESHOLD] == "1040"
    held.restore()
    assert lower.conf.own == {FALLBACK_THRESHOLD: "200"}


def test_a_setting_already_high_enough_or_not_a_number_is_never_touched():
    for value in ("100000", "not-a-number"):
        session = FakeSession(**{FALLBACK_THRESHOLD: value})
        held = GroupsInMemory(session)
        held.at_least(520)
        held.restore()
        assert session.conf.calls == [] and session.conf.own == {FALLBACK_THRESHOLD: value}
    default = FakeSession()
    held = GroupsInMemory(default)
    held.at_least(100)  # within Spark's default of 128
    held.restore()
    assert default.conf.calls == []


def test_a_session_that_refuses_the_setting_still_writes_the_batch():
    class Refusing(FakeConf):
        def set(self, key, value):
            raise RuntimeError("[CONFIG_NOT_AVAILABLE] Configuration is not available.")

    session = FakeSession()
    session.conf = Refusing()
    held = GroupsInMemory(session)
    held.at_least(520)  # logged, not raised: the tasks sort instead
    held.at_least(1040)  # not asked again for this batch
    held.restore()
    assert session.conf.own == {} and session.conf.calls == []
