"""``convert delta``: a Delta table's change data feed, written as CDCv2 and read back exactly.

The table is made and converted in its own process (``jobs/delta_jobs.py``: Delta needs its
package and session extensions when the session starts), with commits of every kind and
``maxFilesPerTrigger=2``, so that many-file commits are split over micro-batches. The topic is
then read back with the project's reader and compared with the table at *every* version. The
command line's ``convert delta`` runs in that process too, through click's ``CliRunner``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import delta_package_or_skip, frame, read_history

from cdc_emitter.protocol.codec import CdcCodec

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parent / "jobs" / "delta_jobs.py"
COLUMNS = "id long, name string, price int"


def codec() -> CdcCodec:
    from cdc_emitter.spark.schema import data_schema
    from cdc_emitter.spark.tables import columns_struct

    return CdcCodec(data_schema(columns_struct(COLUMNS)))


def collection_at(history, version: int) -> Counter:
    out: Counter = Counter()
    for update in history:
        if update.time <= version:
            out[tuple(update.data)] += update.diff
    return +out  # drops rows whose count is 0


@pytest.fixture(scope="module")
def converted(kafka_bootstrap, module_topic_factory, tmp_path_factory):
    """The job's report, after it converted the table in two rounds into a 2-partition topic, and
    the command line converted it into a 1-partition one (``report["cli"]``, with the topic's name
    as ``report["cli_topic"]``)."""
    package = delta_package_or_skip()
    topic, cli_topic = module_topic_factory(2), module_topic_factory(1)
    work = tmp_path_factory.mktemp("delta")
    done = subprocess.run(
        [sys.executable, str(JOB), package, kafka_bootstrap, topic, str(work), cli_topic],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["versions"] = {
        int(v): Counter(tuple(r) for r in rows) for v, rows in report["versions"].items()
    }
    report["cli_topic"] = cli_topic
    return topic, work, report


def test_the_topic_holds_the_table_at_every_version(converted, kafka_bootstrap):
    topic, _work, report = converted
    history, frontier, violations, _reader = read_history(kafka_bootstrap, topic, codec())
    assert violations == []
    latest = max(report["versions"])
    assert frontier == (latest + 1,)
    for version, table in report["versions"].items():
        assert collection_at(history, version) == table, f"version {version}"
    assert {u.time for u in history} == {1, 2, 3, 4, 6, 7, 8}  # v0 created it, v5 changed nothing


def test_split_versions_are_held_until_whole_and_each_version_is_written_by_one_batch(converted):
    _topic, _work, report = converted
    plans = report["plans"]
    held = [p for p in plans if p["held"] is not None]
    # v1 (5 files) and v4 (6 files) came in parts: held open, then read whole from the table
    assert {p["held"][0] for p in held} == {1, 4}
    assert sorted(p["reread"] for p in plans if p["reread"] is not None) == [1, 4]
    written = [int(t) for r in report["results"] for t in r["counts"]]
    assert sorted(written) == sorted(set(written))  # no version in two batches
    # a batch's interval closes only versions it wrote: the intervals chain without a gap
    intervals = [(r["lower"], r["upper"]) for r in report["results"]]
    assert all(a[1] == b[0] for a, b in zip(intervals, intervals[1:])) and intervals[0][0] == 0
    # the second round continued from the checkpoint: its batch ids and versions follow the first's
    first, second = (
        report["results"][: report["first_run"]],
        report["results"][report["first_run"] :],
    )
    assert second and second[0]["lower"] == first[-1]["upper"] == 6
    assert second[0]["batch_id"] > first[-1]["batch_id"]


def test_cli_converts_the_same_table_to_the_same_history(converted, kafka_bootstrap):
    topic, work, report = converted
    again, done = report["cli_topic"], report["cli"]["convert"]
    assert done["exit"] == 0, done["stderr"][-4000:]
    summary = json.loads(done["stdout"])
    expected_updates = sum(r["updates"] for r in report["results"])
    counts = {k: summary.pop(k) for k in ("batches", "messages")}
    assert summary == {
        "source": str(work / "products"),
        "format": "delta",
        "topic": again,
        "updates": expected_updates,
        "frontier": [9],
    }
    assert counts["messages"] > counts["batches"] >= 1  # update arrays and a statement per batch
    ours, frontier, violations, _ = read_history(kafka_bootstrap, again, codec())
    theirs, *_ = read_history(kafka_bootstrap, topic, codec())
    assert violations == [] and frontier == (9,)
    assert ours == theirs

    # nothing new: a second run from the checkpoint writes nothing and says so
    rerun = report["cli"]["rerun"]
    assert rerun["exit"] == 0, rerun["stderr"][-4000:]
    assert (
        rerun["stdout"]
        == f"converted delta table {work / 'products'} to topic {again}: no new changes\n"
    )


def test_cli_refuses_a_table_without_change_data_feed_and_says_how_to_enable_it(converted):
    _topic, work, report = converted
    plain, done = work / "plain", report["cli"]["plain"]
    assert done["exit"] == 2
    assert done["stdout"] == ""
    assert done["stderr"].endswith(
        f"error: delta table '{plain}' has no change data feed: enable it with ALTER TABLE "
        f"delta.`{plain}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true) — changes from the "
        "next commit on are then recorded (pass --starting-version with that commit's version)\n"
    )


def test_change_rows_map_to_signed_updates_at_their_commit_version(spark):
    from cdc_emitter.convert.delta import delta_changes

    rows = [
        (1, "a", "insert", 3, None),
        (1, "a", "update_preimage", 4, None),
        (1, "b", "update_postimage", 4, None),
        (2, "c", "delete", 5, None),
    ]
    changes = frame(
        spark,
        rows,
        "id long, name string, _change_type string, _commit_version long, _commit_timestamp timestamp",
    )
    out = delta_changes(changes)
    assert out.columns == ["id", "name", "_commit_version", "_cdc_diff"]
    assert sorted(map(tuple, out.collect())) == [
        (1, "a", 3, 1),
        (1, "a", 4, -1),
        (1, "b", 4, 1),
        (2, "c", 5, -1),
    ]


def test_an_unknown_change_type_a_missing_column_or_a_clashing_name_is_refused(spark):
    from cdc_emitter.convert.delta import delta_changes
    from cdc_emitter.errors import SchemaError

    odd = frame(spark, [(1, "upsert", 3)], "id long, _change_type string, _commit_version long")
    with pytest.raises(Exception, match="unknown _change_type upsert"):
        delta_changes(odd).collect()
    with pytest.raises(
        SchemaError, match=r"not a change data feed: column\(s\) _change_type missing"
    ):
        delta_changes(frame(spark, [(1, 3)], "id long, _commit_version long"))
    clash = frame(
        spark,
        [(1, "insert", 3, 1)],
        "id long, _change_type string, _commit_version long, _cdc_diff long",
    )
    with pytest.raises(SchemaError, match="the table has a column named '_cdc_diff'"):
        delta_changes(clash)
