"""BatchResult and PhaseClock: the figures each sink batch reports (pure, no Spark)."""

from __future__ import annotations

import json

import pytest

from cdc_emitter import BatchResult
from cdc_emitter.sink.result import PhaseClock


class FakeClock:
    def __init__(self, *ticks: float) -> None:
        self.ticks = list(ticks)

    def __call__(self) -> float:
        return self.ticks.pop(0)


def test_phase_clock_measures_each_phase_from_the_previous_mark_and_orders_them():
    clock = PhaseClock(FakeClock(10.0, 10.5, 12.0, 12.25, 13.0))
    clock.mark("plan")  # 0.5
    clock.mark("check")  # 1.5
    clock.mark("commit")  # 0.25
    assert clock.seconds() == {"plan": 0.5, "check": 1.5, "commit": 0.25, "total": 3.0}


def test_phase_clock_adds_a_phase_marked_twice_and_refuses_an_unknown_one():
    clock = PhaseClock(FakeClock(0.0, 1.0, 3.0, 6.0))
    clock.mark("write")
    clock.mark("write")
    assert clock.seconds() == {"write": 3.0, "total": 6.0}
    with pytest.raises(ValueError, match="unknown phase 'send'.*plan, check, commit, write"):
        clock.mark("send")


def test_batch_result_as_dict_is_plain_json_and_the_log_text_names_every_figure():
    result = BatchResult(
        7,
        12,
        15,
        5,
        3,
        {14: 2, 12: 3},
        False,
        bytes=4817,
        seconds={"plan": 0.0041, "check": 0.1123, "commit": 0.006, "total": 0.2},
        topic="orders",
        encoder="jvm",
        finished_on="driver",
        consolidated_on="executors",
    )
    assert json.loads(json.dumps(result.as_dict())) == {
        "topic": "orders",
        "batch_id": 7,
        "lower": 12,
        "upper": 15,
        "updates": 5,
        "messages": 3,
        "bytes": 4817,
        "counts": {"12": 3, "14": 2},
        "reused": False,
        "redundant": False,
        "encoder": "jvm",
        "finished_on": "driver",
        "consolidated_on": "executors",
        "seconds": {"plan": 0.0041, "check": 0.1123, "commit": 0.006, "total": 0.2},
    }
    assert result.log_text() == (
        "updates=5 messages=3 bytes=4817 seconds: plan=0.004 check=0.112 commit=0.006 total=0.200"
    )


def test_a_closed_batch_has_no_upper_and_a_result_without_timings_says_no_seconds():
    result = BatchResult(None, 3, None, 0, 1, {}, False, bytes=9)
    assert result.as_dict()["upper"] is None
    assert result.log_text() == "updates=0 messages=1 bytes=9"
