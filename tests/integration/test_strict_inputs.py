"""csv and json are read strictly (mode=FAILFAST) by read_table: a garbled file fails with a
ConfigError naming its line — at load (json's schema inference) or at the action that reads the
rows (malformed_input_error) — and -O mode=PERMISSIVE reads it as Spark always did."""

from __future__ import annotations

import pytest

from cdc_emitter.errors import ConfigError
from cdc_emitter.spark.tables import malformed_input_error, read_table

pytestmark = [pytest.mark.spark]

GARBLED = 'id,name,price\n1,apple,1.5\n2,"banana, ripe",2.0\n3,"unterminated,4.0\n4,cherry,3.0\n'
HEADER = {"header": "true"}


def rows_of(df, source: str, fmt: str, options: dict, how: str) -> list:
    """The rows, read by ``how`` (``collect``, or ``toArrow`` as the sink's driver path does);
    a malformed record raises our ConfigError, as the CLI does around the sink's write."""
    try:
        return df.collect() if how == "collect" else df.toArrow().to_pylist()
    except Exception as exc:
        ours = malformed_input_error(exc, source, fmt, options)
        if ours is None:
            raise
        raise ours from exc


@pytest.mark.parametrize("how", ["collect", "toArrow"])
def test_a_garbled_csv_fails_naming_its_line(spark, tmp_path, how):
    if how == "toArrow" and not hasattr(spark.range(1), "toArrow"):
        pytest.skip("DataFrame.toArrow is PySpark 4's")
    path = str(tmp_path / "garbled.csv")
    with open(path, "w") as fh:
        fh.write(GARBLED)
    df = read_table(spark, path, "csv", HEADER)  # strict, yet nothing read but the header
    with pytest.raises(ConfigError) as info:
        rows_of(df, path, "csv", HEADER, how)
    assert str(info.value).startswith(
        f"malformed csv record in {path!r} at line 4 (2 fields, the header has 3): "
        "'3,\"unterminated,4.0'; fix the file, or pass -O mode=PERMISSIVE"
    )


def test_permissive_reads_the_garbled_csv(spark, tmp_path):
    path = str(tmp_path / "garbled.csv")
    with open(path, "w") as fh:
        fh.write(GARBLED)
    options = {**HEADER, "MODE": "PERMISSIVE"}
    rows = rows_of(read_table(spark, path, "csv", options), path, "csv", options, "collect")
    assert [r["id"] for r in rows] == ["1", "2", "3", "4"]


def test_a_malformed_json_line_fails_at_load(spark, tmp_path):
    path = str(tmp_path / "bad.json")
    with open(path, "w") as fh:
        fh.write('{"a": 1}\n\n{"a": 2\n{"a": 3}\n')
    with pytest.raises(ConfigError) as info:
        read_table(spark, path, "json", {})
    assert str(info.value).startswith(
        f"malformed json record in {path!r} at line 3 (Expecting ',' delimiter at column 8): "
        "'{\"a\": 2'; fix the file"
    )
    df = read_table(spark, path, "json", {"mode": "PERMISSIVE"})
    assert df.count() == 3


@pytest.mark.kafka
def test_export_of_a_garbled_csv_names_the_line_and_writes_nothing(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    from click.testing import CliRunner
    from helpers import count_messages

    from cdc_emitter.cli import main

    path = str(tmp_path / "garbled.csv")
    with open(path, "w") as fh:
        fh.write(GARBLED)
    topic = topic_factory()
    result = CliRunner().invoke(
        main,
        ["export", path, "--format", "csv", "-O", "header=true", "--topic", topic]
        + ["--bootstrap-servers", kafka_bootstrap],
        prog_name="cdc-emitter",
    )
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr == (
        f"error: malformed csv record in {path!r} at line 4 (2 fields, the header has 3): "
        "'3,\"unterminated,4.0'; fix the file, or pass -O mode=PERMISSIVE to read malformed "
        "records as nulls (-O mode=DROPMALFORMED to skip them)\n"
    )
    assert count_messages(kafka_bootstrap, topic) == 0


@pytest.mark.kafka
def test_export_of_utf16_csv_without_a_byte_order_mark(
    spark, kafka_bootstrap, topic_factory, tmp_path
):
    """A UTF-16LE CSV export is refused before Spark (the hint names the options), and with
    those options its rows reach the topic as written, not as garbage."""
    from click.testing import CliRunner
    from helpers import as_history, read_history

    from cdc_emitter.cli import main
    from cdc_emitter.protocol.codec import CdcCodec

    path = str(tmp_path / "wide.csv")
    with open(path, "wb") as fh:
        fh.write("id,name\n1,äpfel\n2,pear\n".encode("utf-16-le"))
    topic = topic_factory()
    base = ["export", path, "--format", "csv", "-O", "header=true", "--topic", topic]
    base += ["--bootstrap-servers", kafka_bootstrap, "--time", "1"]
    refused = CliRunner().invoke(main, base, prog_name="cdc-emitter")
    assert (refused.exit_code, refused.stdout) == (2, ""), refused.output
    assert refused.stderr.endswith(
        "it looks like UTF-16LE text without a byte order mark: pass -O encoding=UTF-16LE "
        "-O multiLine=true\n"
    )
    wide = ["-O", "encoding=UTF-16LE", "-O", "multiLine=true"]
    done = CliRunner().invoke(main, [*base, *wide], prog_name="cdc-emitter")
    assert done.exit_code == 0, done.output
    schema = {
        "type": "record",
        "name": "data",
        "fields": [{"name": n, "type": ["null", "string"]} for n in ("id", "name")],
    }
    history, frontier, violations, _ = read_history(kafka_bootstrap, topic, CdcCodec(schema))
    assert (frontier, violations) == ((2,), [])
    assert history == as_history([(("1", "äpfel"), 1, 1), (("2", "pear"), 1, 1)])
