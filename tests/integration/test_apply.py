"""``cdc-emitter apply``: a Delta table kept equal to a topic's collection, one commit per
micro-batch, checked at every version by time travel; a crash after a commit and a lost
checkpoint apply no time twice; a violation stops the command naming it. Multiplicities as a
count column and as copies of rows; a Delta path and a catalog table; the streaming query and
the driver's loop (PySpark 3.5's way).

The scenario runs in its own process (``jobs/apply_job.py``: Delta needs its package when the
session starts), the command line through click's ``CliRunner`` inside it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import delta_package_or_skip

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parent / "jobs" / "apply_job.py"


@pytest.fixture(scope="module")
def report(kafka_bootstrap, module_topic_factory, tmp_path_factory):
    delta_package_or_skip()
    topic, other, trip = module_topic_factory(), module_topic_factory(), module_topic_factory(2)
    work = tmp_path_factory.mktemp("apply")
    done = subprocess.run(
        [sys.executable, str(JOB), kafka_bootstrap, topic, other, trip, str(work)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["topic"], out["table"] = topic, str(work / "table")
    return out


def collection_at(written, time: int) -> Counter:
    """The collection at ``time``: every distinct update at a time up to it (duplicates, as
    the topic has them, counted once)."""
    out: Counter = Counter()
    for data, t, diff in {(tuple(d), t, diff) for d, t, diff in written}:
        if t <= time:
            out[data] += diff
    return +out


def test_each_version_is_the_collection_at_its_time(report):
    versions = {int(v): x for v, x in report["versions"].items()}
    assert versions[0] == {"time": None, "rows": []}  # the table made empty
    times = [versions[v]["time"] for v in sorted(versions) if v > 0]
    assert times == [1, 2, 5]  # rounds 1 and 2 (time 3 open), round 3 (3 to 5 at once)
    for version, state in versions.items():
        if version > 0:
            keys = [(k, v) for k, v, _count in state["rows"]]
            assert len(keys) == len(set(keys)), state  # one row per data row
            assert all(count >= 1 for _k, _v, count in state["rows"]), state  # 0 is deleted
            table = Counter({(k, v): count for k, v, count in state["rows"]})
            assert table == collection_at(report["written"], state["time"]), version


def test_a_batch_read_again_after_its_commit_commits_nothing(report):
    assert report["crash"] == "simulated crash"
    assert report["crashed_at"] == [2]
    if report["engine"] == "stream":  # Spark reads the uncommitted batch again: no version
        assert report["redo"] == [[None, 2]]
    else:  # PySpark 3.5: the driver starts after the table's time 2, and finds nothing new
        assert report["redo"] == []


def test_the_command_line(report):
    topic, table = report["topic"], report["table"]
    first, again, idle, broken = report["commands"]
    assert first == {
        "exit": 0,
        "stdout": f"applied topic {topic} to {table}: 1 commits, the table holds every time up "
        "to 1 (version 1)\n",
        "stderr": "",
    }
    # the checkpoint deleted: the topic read again, only times 3 to 5 applied
    assert (again["exit"], again["stderr"]) == (0, "")
    assert json.loads(again["stdout"]) == {
        "topic": topic,
        "table": table,
        "commits": 1,
        "time": 5,
        "version": 3,
    }
    assert idle == {
        "exit": 0,
        "stdout": f"applied topic {topic} to {table}: no new complete times\n",
        "stderr": "",
    }
    assert (broken["exit"], broken["stdout"]) == (2, "")
    assert broken["stderr"].startswith(
        f"error: applying topic {topic} to {table} failed: topic {topic!r} breaks the CDCv2 "
        "protocol: count_mismatch at time 3"
    ), broken["stderr"]


def test_multiplicity_as_copies_of_rows(report):
    """Applied by the driver's loop (PySpark 3.5's way), crashed after its first commit, then
    run again: the second run commits only later times."""
    (crashed_at,) = report["rows_crash"]  # one batch of all times, as a rule: then no redo
    assert all(time > crashed_at for _, time in report["rows_redo"]), report["rows_redo"]
    versions = {int(v): x for v, x in report["rows_versions"].items()}
    times = [versions[v]["time"] for v in sorted(versions) if v > 0]
    assert times == sorted(set(times))  # no time applied twice
    assert versions[0] == {"time": None, "rows": []}
    assert [versions[v]["time"] for v in sorted(versions) if v > 0][-1] == 5
    for version, state in versions.items():
        if version > 0:  # the data columns only, a row held n times there n times
            assert all(len(row) == 2 for row in state["rows"])
            table = Counter(tuple(row) for row in state["rows"])
            assert table == collection_at(report["written"], state["time"]), version
    last = Counter(tuple(r) for r in versions[max(versions)]["rows"])
    assert last[(2, "b")] == 3  # 2 at time 1, 1 at time 3


def test_a_catalog_table_through_the_command_line(report):
    named = report["named"]
    assert (named["exit"], named["stderr"]) == (0, ""), named
    summary = json.loads(named["stdout"])
    assert (summary["table"], summary["time"]) == ("replica", 5)
    assert Counter(tuple(r) for r in named["rows"]) == collection_at(report["written"], 5)


def test_copies_cannot_hold_a_multiplicity_below_zero(report):
    assert (
        "row (9, 'z') would be held -1 times after time 1: copies of a row hold from 0 to "
        "2,147,483,647 of it; keep a 'count' column instead (multiplicity 'count')"
        in (report["negative"])
    ), report["negative"]


def test_the_round_trip_with_a_crash_at_every_step(report):
    """``examples/round_trip.py``: each Delta version of both tables (a count column, copies of
    rows) equals the source table at its time, round by round."""
    trip = report["round_trip"]
    assert trip["crashes"] == [
        "sink after writing batch 1",
        "apply after reading a batch",
        "apply after its Delta commit",
    ]
    assert trip["wrong"] == [] and trip["ok"]
    for kept in ("count", "rows"):
        times = [v["time"] for v in trip["versions"] if v["table"] == kept]
        assert times == [0, 1, 2, 3], kept  # one commit per round, none twice
