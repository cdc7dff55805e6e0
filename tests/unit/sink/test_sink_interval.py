"""The sink's interval decisions, pure: a new batch from the frontier, a re-run from its record."""

from __future__ import annotations

import pytest

from cdc_emitter.errors import BadInputError, LateUpdateError
from cdc_emitter.sink.interval import Recorded, batch_time, batch_upper, recorded_from_statement


def time_of(**kw):
    args = dict(
        topic="t",
        lower=5,
        recorded=None,
        fixed_time=None,
        batch_id=None,
        time_offset=0,
        late="error",
    )
    return batch_time(**{**args, **kw})


def upper_of(**kw):
    args = dict(
        what="batch 3",
        lower=5,
        recorded=None,
        close=False,
        column_mode=False,
        time=None,
        max_time=None,
        upper_hint=None,
    )
    return batch_upper(**{**args, **kw})


def test_a_statement_found_in_the_topic_gives_the_first_attempts_decision():
    assert recorded_from_statement(4, 7, column_mode=False) == Recorded(
        4, 7, 6
    )  # its time: the last
    assert recorded_from_statement(4, 7, column_mode=True) == Recorded(4, 7, None)
    assert recorded_from_statement(4, None, column_mode=False) == Recorded(4, None, None)


def test_the_batch_time_of_a_new_batch():
    assert time_of() == 5  # write() without a time: the frontier
    assert (
        time_of(batch_id=9) == 9 and time_of(batch_id=2) == 5
    )  # batch id, never below the frontier
    assert time_of(batch_id=2, time_offset=100) == 102
    assert time_of(fixed_time=8, batch_id=1) == 8  # write(time=...) wins over the batch id
    assert time_of(fixed_time=3, late="advance") == 5
    with pytest.raises(
        LateUpdateError,
        match=r"time 3 is late: topic 't' is complete up to frontier 5; "
        r"write at a time >= 5 or pass late='advance'",
    ):
        time_of(fixed_time=3)


def test_a_rerun_keeps_its_recorded_time():
    assert time_of(recorded=Recorded(2, 4, 3), fixed_time=9, batch_id=7) == 3
    assert time_of(lower=2, recorded=Recorded(2, 4, None)) == 2


def test_the_upper_of_a_new_batch():
    assert upper_of(time=8) == 9  # default mode: the batch's time + 1
    assert upper_of(close=True, time=8) is None
    assert upper_of(column_mode=True, max_time=11) == 12
    assert (
        upper_of(column_mode=True, max_time=None) == 5
    )  # no updates: an empty interval at the frontier
    assert (
        upper_of(column_mode=True, max_time=3) == 5
    )  # (late ones were advanced or refused before)
    assert upper_of(column_mode=True, max_time=11, upper_hint=20) == 20  # write_upto
    assert upper_of(column_mode=True, upper_hint=2) == 5
    with pytest.raises(
        BadInputError, match=r"batch 3: update at time 20 is not below the batch's upper 20"
    ):
        upper_of(column_mode=True, max_time=20, upper_hint=20)


def test_a_rerun_keeps_its_recorded_upper_and_refuses_a_wider_input():
    assert upper_of(recorded=Recorded(5, 9, None), column_mode=True, max_time=8, close=True) == 9
    assert upper_of(recorded=Recorded(5, None, 4), max_time=100) is None
    with pytest.raises(
        BadInputError,
        match=r"batch 3 is a re-run whose recorded interval is \[5, 9\), "
        r"but now has an update at time 9",
    ):
        upper_of(recorded=Recorded(5, 9, None), column_mode=True, max_time=9)
