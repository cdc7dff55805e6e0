"""Ctrl-C and SIGTERM: a command stops with exit 130 / 143 and one line saying what it left, and
running the same command again completes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cdc_emitter.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parent / "jobs" / "cli_paused.py"


def _cli(*args):
    result = CliRunner().invoke(main, list(args), prog_name="cdc-emitter")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.mark.parametrize(
    "sig, code, how",
    [
        (signal.SIGINT, 130, "interrupted (Ctrl-C)"),
        (signal.SIGTERM, 143, "terminated (SIGTERM)"),
    ],
    ids=["sigint", "sigterm"],
)
def test_an_export_stopped_after_its_claim_says_so_and_the_same_command_completes_it(
    spark, kafka_bootstrap, topic_factory, tmp_path, sig, code, how
):
    rows = 3000
    source = str(tmp_path / "table.parquet")
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), source)
    topic = topic_factory()
    args = ["export", source, "--topic", topic, "--bootstrap-servers", kafka_bootstrap]
    env = {**os.environ, "CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM": "120"}
    job = subprocess.Popen(
        [sys.executable, str(JOB), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # Spark starts, reads, claims
            line = job.stderr.readline()
            if not line:
                break
            seen.append(line)
            if line.strip() == "claimed":
                break
        assert seen and seen[-1].strip() == "claimed", "".join(seen)[-3000:]
        job.send_signal(sig)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == code, err[-3000:]
    assert out == ""
    # a new JVM resolved the sink's packages: Spark's own output (Ivy's log) went to its log file
    seen_text = "".join(seen) + err
    for ivy in (":: resolving dependencies", "Ivy Default Cache", ":: loading settings"):
        assert ivy not in seen_text, seen_text[-3000:]
    assert err.strip().splitlines()[-1] == (
        f"{how}: topic {topic} has times [0, 1) claimed and only part of their updates written; "
        "readers wait at time 0 until the same command is run again, which completes them"
    )

    # readers see the claim and wait on it: not proven
    waiting = _cli("verify", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--json")
    assert waiting.exit_code == 3, waiting.output

    again = _cli(*args, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["frontier"] == [1]
    out_file = tmp_path / "table.jsonl"
    proven = _cli(
        "verify",
        *("--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--output", str(out_file)),
    )
    assert proven.exit_code == 0, proven.output
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert sorted(line["data"]["id"] for line in lines) == list(range(rows))
    assert {line["count"] for line in lines} == {1}
