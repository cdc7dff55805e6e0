"""The trigger interval of ``cdc-emitter apply`` read as Spark spells it (the driver's loop on
PySpark 3.5 keeps the same pace as a streaming query's trigger)."""

from __future__ import annotations

import pytest

from cdc_emitter.errors import ConfigError
from cdc_emitter.read.apply import (
    FOLLOW_INTERVAL,
    ONCE_INTERVAL,
    default_interval,
    trigger_seconds,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1 second", 1.0),
        ("500 milliseconds", 0.5),
        ("2 minutes", 120.0),
        ("0.5 seconds", 0.5),
        ("interval 3 seconds", 3.0),
        ("1 Hour", 3600.0),
        ("1 minute 30 seconds", 90.0),
        ("1 day", 86400.0),
        ("2 weeks", 1209600.0),
        ("100 microseconds", 0.0001),
        ("0 seconds", 0.0),
        (".5 second", 0.5),
        ("1. second", 1.0),
        ("+1 second", 1.0),
        ("1 minute -30 seconds", 30.0),
    ],
)
def test_spark_spellings(text, seconds):
    assert trigger_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "x",
        "5",
        "1 fortnight",
        "seconds",
        "",
        "1s",
        "2 mins",
        "10 ms",
        "1 month",
        "1second",
        "1 second2 seconds",
        "interval1 second",
        "0.1234567891 seconds",
    ],
)
def test_not_an_interval(text):
    with pytest.raises(ConfigError) as info:
        trigger_seconds(text)
    assert str(info.value) == (
        f"trigger interval {text!r} is not an interval: write it like '1 second', "
        "'500 milliseconds' or '1 minute 30 seconds'"
    )


def test_a_fraction_only_on_seconds():
    with pytest.raises(ConfigError) as info:
        trigger_seconds("0.5 minutes")
    assert str(info.value) == (
        "trigger interval '0.5 minutes': only seconds take a fraction (0.5 minute); write it "
        "in a smaller unit"
    )


def test_below_zero_is_refused():
    with pytest.raises(ConfigError) as info:
        trigger_seconds("-1 second")
    assert str(info.value) == "trigger interval '-1 second' is below 0"


def test_the_default_interval_follows_every_5_seconds_and_once_runs_back_to_back():
    assert (FOLLOW_INTERVAL, ONCE_INTERVAL) == ("5 seconds", "0 seconds")
    assert default_interval(None, once=False) == FOLLOW_INTERVAL
    assert default_interval(None, once=True) == ONCE_INTERVAL
    assert default_interval("2 seconds", once=True) == "2 seconds"
    assert trigger_seconds(FOLLOW_INTERVAL) == 5.0 and trigger_seconds(ONCE_INTERVAL) == 0.0
