"""The benchmark runner's bookkeeping (``benchmarks/run.py``): what a run keeps of the last one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def _runner():
    spec = importlib.util.spec_from_file_location("bench_runner", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LAST = {"date": "2026-11-29T02:10:54Z", "commit": {"hash": "c55570d"}, "machine": {"cores": 2}}


def test_a_carried_result_keeps_its_own_date_commit_and_machine():
    own = {"date": "2026-11-28T13:22:06Z", "commit": {"hash": "abcd69e"}, "machine": {"cores": 4}}
    assert _runner().carried(LAST, {**own, "ratios": {}}) == {**own, "ratios": {}}


def test_a_carried_result_without_a_machine_is_not_given_the_last_runs():
    own = {"date": "2026-11-28T13:22:06Z", "commit": {"hash": "abcd69e"}}
    assert _runner().carried(LAST, own) == {**own, "machine": None}


def test_a_result_of_the_last_run_without_a_date_takes_that_runs():
    assert _runner().carried(LAST, {"ratios": {}}) == {**LAST, "ratios": {}}
