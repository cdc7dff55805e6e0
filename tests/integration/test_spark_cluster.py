"""The sink where users' Spark runs: a standalone cluster whose executors have no Python at all,
and Spark Connect. The cluster (``scripts/spark-local start --connect``) starts once, for this module;
each job runs in its own process (see ``jobs/cluster_jobs.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import as_history, count_messages, read_history

from cdc_emitter.protocol.codec import CdcCodec

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SPARK_LOCAL = ROOT / "scripts" / "spark-local"
JOBS = Path(__file__).resolve().parent / "jobs" / "cluster_jobs.py"
DATA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": ["null", "long"]}, {"name": "v", "type": ["null", "string"]}],
}


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """``(spark://…, sc://…, env)`` of a standalone cluster with a Spark Connect server, for this
    module only (stopped after it, so it does not idle through the rest of the session)."""
    env = dict(
        os.environ,
        CDC_SPARK_HOME=str(tmp_path_factory.mktemp("spark-local")),
        CDC_SPARK_PYTHON=sys.executable,
    )
    # The tests' JVM options (tests/conftest.py) for the executors too, which the worker starts
    # with its own environment; JDK_JAVA_OPTIONS reaches every JVM of the cluster, so only when
    # drivers and daemons are to run alike (not, say, a debugger's port set for drivers alone).
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if options and options == os.environ.get("SPARK_DAEMON_JAVA_OPTS"):
        env["JDK_JAVA_OPTIONS"] = options
    started = subprocess.run(
        [str(SPARK_LOCAL), "start", "--connect"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    master, connect = started.stdout.split()[-2:]
    yield master, connect, env
    subprocess.run([str(SPARK_LOCAL), "stop"], env=env, capture_output=True, timeout=120)


def _job(*args: str, env: dict) -> str:
    done = subprocess.run(
        [sys.executable, str(JOBS), *args], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-4000:]
    return done.stderr


def _jobs():
    """The jobs module (it is a script, not part of the test package)."""
    sys.path.insert(0, str(JOBS.parent))
    import cluster_jobs

    return cluster_jobs


def _expected(parts) -> list:
    rows = _jobs().rows
    return as_history(
        ((r["k"], r["v"]), r["t"], r["diff"]) for part, n in parts for r in rows(part, n)
    )


def test_standalone_executors_without_python_survive_a_lost_worker_and_an_executor_kill(
    spark_cluster, kafka_bootstrap, topic_factory, tmp_path
):
    master, _connect, env = spark_cluster
    topic = topic_factory(3)
    spark_local = f"CDC_SPARK_HOME={env['CDC_SPARK_HOME']} {SPARK_LOCAL}"
    log = _job("standalone", master, kafka_bootstrap, topic, str(tmp_path), spark_local, env=env)
    assert "SIGKILL the worker" in log and "SIGKILL executor" in log
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, CdcCodec(DATA))
    assert violations == []
    assert frontier == (33,)
    assert history == _expected(_jobs().PARTS)


def test_connect_crash_restart_second_query_and_write(
    spark_cluster, kafka_bootstrap, topic_factory, tmp_path
):
    _master, connect, env = spark_cluster
    topic = topic_factory(1)
    _job("connect", connect, kafka_bootstrap, topic, str(tmp_path), env=env)
    # its second topic: batches of one time, the last consolidated
    jobs = _jobs()
    history, frontier, violations, _ = read_history(
        kafka_bootstrap, topic + jobs.ONE_TIME, CdcCodec(DATA)
    )
    assert (violations, frontier) == ([], (len(jobs.ONE_TIME_TIMES),))
    assert count_messages(kafka_bootstrap, topic + jobs.REFUSED) == 0  # the refused batch
    assert history == as_history(
        ((r["k"], r["v"]), time_, r["diff"])
        for time_ in jobs.ONE_TIME_TIMES
        for r in jobs.one_time_rows(time_)
    )
    history, frontier, violations, reader = read_history(kafka_bootstrap, topic, CdcCodec(DATA))
    assert violations == []
    assert frontier == (43,)
    assert history == _expected([(p, 2_000) for p in range(5)])


def test_export_remote_writes_an_exact_snapshot(spark_cluster, kafka_bootstrap, tmp_path):
    _master, connect, env = spark_cluster
    topic = f"export-remote-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "table.json"
    source.write_text("".join(json.dumps({"k": k % 7, "v": f"v{k % 3}"}) + "\n" for k in range(50)))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdc_emitter.cli",
            "export",
            str(source),
            "--format",
            "json",
            "--remote",
            connect,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--create-topic",
            "--time",
            "3",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["frontier"] == [4]
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, CdcCodec(DATA))
    assert (frontier, violations) == ((4,), [])
    assert history == as_history(((k % 7, f"v{k % 3}"), 3, 1) for k in range(50))
    # and read back through the same Connect server with read_cdc
    script = (
        "import json; from pyspark.sql import SparkSession; from cdc_emitter import read_cdc; "
        f"s = SparkSession.builder.remote({connect!r}).getOrCreate(); "
        f"r = read_cdc(s, bootstrap_servers={kafka_bootstrap!r}, topic={topic!r}, schema={DATA!r}); "
        "print(json.dumps({'frontier': list(r.frontier), 'verdict': r.verdict, "
        "'collection': sorted(list(row) for row in r.collection.collect())}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts: dict = {}
    for k in range(50):
        counts[(k % 7, f"v{k % 3}")] = counts.get((k % 7, f"v{k % 3}"), 0) + 1
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "frontier": [4],
        "verdict": "verified",
        "collection": sorted([*key, n] for key, n in counts.items()),
    }
    # verify --engine spark through Connect prints and writes what the local engine does
    schema_file = tmp_path / "data.avsc"
    schema_file.write_text(json.dumps(DATA))
    outputs = []
    for engine in ("local", "spark"):
        out = tmp_path / f"{engine}.jsonl"
        extra = ["--remote", connect] if engine == "spark" else []
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cdc_emitter.cli",
                "verify",
                "--engine",
                engine,
                *extra,
                "--bootstrap-servers",
                kafka_bootstrap,
                "--topic",
                topic,
                "--schema",
                str(schema_file),
                "--json",
                "--output",
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append((done.stdout, out.read_bytes()))
    assert outputs[0] == outputs[1] and outputs[0][1].count(b"\n") == len(counts)


def test_convert_remote_writes_the_changefeed_as_a_local_session_would(
    spark_cluster, kafka_bootstrap, topic_factory, tmp_path
):
    """`convert cockroachdb --remote`: the streaming query runs on the Connect server, its
    foreachBatch sink in the server's Python; the topic holds the table at the resolved time."""
    from changefeeds import Table, cockroachdb_messages, produce, resolved_wall
    from test_convert_kafka import COLUMNS, codec, collection_at, state_at

    _master, connect, env = spark_cluster
    source, out = topic_factory(2), topic_factory(1)
    table = Table(seed=11)
    table.apply(20)
    produce(
        kafka_bootstrap, source, cockroachdb_messages(table.changes, 2, resolved_tick=20, seed=11)
    )
    args = [
        sys.executable,
        "-m",
        "cdc_emitter.cli",
        "convert",
        "cockroachdb",
        source,
        "--columns",
        COLUMNS,
        "--topic",
        out,
        "--checkpoint",
        str(tmp_path / "ck"),
        "--once",
        "--remote",
        connect,
        "--bootstrap-servers",
        kafka_bootstrap,
    ]
    done = subprocess.run([*args, "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    history, frontier, violations, _ = read_history(kafka_bootstrap, out, codec())
    assert violations == [] and frontier == (resolved_wall(20),)
    # the sink ran in the server's Python: the summary is what the topic shows
    assert summary == {
        "source": source,
        "format": "cockroachdb",
        "topic": out,
        "batches": None,
        "updates": None,
        "messages": None,
        "frontier": [resolved_wall(20)],
    }
    assert collection_at(history, resolved_wall(20)) == state_at(table.changes, 20)
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == f"converted cockroachdb topic {source} to topic {out}: no new changes\n"
