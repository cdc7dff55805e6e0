"""The sink, verify, tail and export against a broker that speaks SASL/SCRAM over TLS
(``scripts/kafka-local start --secure``), and a wrong password failing fast, with exit 2 and no
secret anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from click.testing import CliRunner
from helpers import frame

from cdc_emitter import CdcSink
from cdc_emitter.cli import main
from cdc_emitter.errors import RefusedError
from cdc_emitter.kafka.topics import ensure_topic
from cdc_emitter.protocol.codec import CdcCodec, union_schema
from cdc_emitter.read.verify import verify_topic
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

WRONG = "not-the-password-8f3a"


def _x(settings):
    """The settings as -X options."""
    return [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]


def _cli(*args):
    return CliRunner().invoke(main, list(args), prog_name="cdc-emitter")


@pytest.mark.spark
def test_sink_verify_tail_and_export_over_sasl_ssl(spark, secure_kafka, tmp_path, caplog):
    import logging

    caplog.set_level(logging.DEBUG)  # every log line of this test, librdkafka's included
    bootstrap, settings = secure_kafka
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True, partitions=2, config=settings)
    df = frame(spark, [(1, "a"), (2, "b"), (2, "b")], "k long, v string")
    CdcSink(bootstrap, topic, producer_config=settings).write(df, time=0)
    codec = CdcCodec(data_schema(df.schema))
    result = verify_topic(bootstrap, topic, codec, config=settings)
    assert (result.verdict, result.frontier, result.collection) == (
        "verified",
        (1,),
        {(1, "a"): 1, (2, "b"): 2},
    )

    schema = tmp_path / "kv.avsc"
    schema.write_text(json.dumps(union_schema(data_schema(df.schema))))
    verified = _cli(
        "verify",
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--schema",
        str(schema),
        "--json",
        *_x(settings),
    )
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["frontier"] == [1]
    tailed = _cli(
        "tail",
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--schema",
        str(schema),
        *_x(settings),
    )
    lines = tailed.stdout.splitlines()
    assert (
        tailed.exit_code == 0
        and sum(line.startswith('{"com.materialize.cdc.progress"') for line in lines) == 1
    )

    # export, in its own process as a user runs it, continues the topic at time 1
    source = tmp_path / "more.json"
    source.write_text('{"k": 3, "v": "c"}\n')
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdc_emitter.cli",
            "export",
            str(source),
            "--format",
            "json",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            "--json",
            *_x(settings),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert json.loads(exported.stdout.splitlines()[-1])["frontier"] == [2]
    for output in (verified.output, tailed.output, exported.stdout, exported.stderr, caplog.text):
        assert settings["sasl.password"] not in output


def test_a_wrong_password_fails_fast_with_exit_2_and_no_secret(secure_kafka, tmp_path, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    bootstrap, settings = secure_kafka
    wrong = dict(settings, **{"sasl.password": WRONG})
    schema = tmp_path / "kv.avsc"
    schema.write_text(
        json.dumps(
            union_schema(
                {"type": "record", "name": "data", "fields": [{"name": "k", "type": "long"}]}
            )
        )
    )
    for command in ("verify", "tail"):
        began = time.monotonic()
        result = _cli(
            command,
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            "any",
            "--schema",
            str(schema),
            *_x(wrong),
        )
        assert time.monotonic() - began < 5
        assert result.exit_code == 2
        assert result.stderr.startswith(f"error: authentication with Kafka at {bootstrap} failed: ")
        assert "SASL authentication error" in result.stderr.splitlines()[0]
        assert WRONG not in result.output and settings["sasl.password"] not in result.output
    began = time.monotonic()
    with pytest.raises(RefusedError, match=r"^authentication with Kafka at .* failed") as info:
        CdcSink(bootstrap, "any", producer_config=wrong).frontier()
    assert time.monotonic() - began < 5 and WRONG not in str(info.value)
    assert WRONG not in caplog.text and settings["sasl.password"] not in caplog.text
