"""check_source: a local SOURCE that does not exist, holds no data, or holds another format than
--format says is refused before Spark starts, with the --format to pass; what it cannot see (other
file systems, globs, Spark Connect) passes."""

from __future__ import annotations

import gzip
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_emitter.errors import ConfigError
from cdc_emitter.spark.sources import check_source, data_files, local_path


def parquet_file(path) -> str:
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}), str(path))
    return str(path)


def refused(path, fmt: str, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        check_source(str(path), fmt, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.fixture(autouse=True)
def _local_spark(monkeypatch):
    for var in ("SPARK_REMOTE", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_CONF_DIR", "SPARK_HOME"):
        monkeypatch.delenv(var, raising=False)


# --- what exists, and what is not looked at ---------------------------------------------------


def test_a_missing_path_is_named_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refused("nope.parquet", "parquet")
    assert message.startswith("input path 'nope.parquet' does not exist (relative to ")
    assert "check the path" in message and "s3a://" in message


def test_a_missing_file_uri_is_refused_too(tmp_path):
    assert "does not exist" in refused(f"file://{tmp_path}/nope.csv", "csv")


@pytest.mark.parametrize(
    "path",
    ["s3a://bucket/nope.parquet", "hdfs://nn:8020/nope", "abfss://c@acct.dfs.core/x", "gs://b/x"],
)
def test_other_file_systems_are_not_checked(path):
    check_source(path, "parquet")


@pytest.mark.parametrize("fmt", ["jdbc", "table"])
def test_tables_and_jdbc_are_not_paths(fmt):
    check_source("shop.orders", fmt)


def test_a_glob_is_left_to_spark(tmp_path):
    check_source(str(tmp_path / "part-*.parquet"), "parquet")


def test_spark_connect_reads_paths_on_its_server(tmp_path, monkeypatch):
    check_source(str(tmp_path / "nope.parquet"), "parquet", remote="sc://spark:15002")
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark:15002")
    check_source(str(tmp_path / "nope.parquet"), "parquet")


def test_a_default_file_system_other_than_the_local_one_takes_paths_without_scheme(tmp_path):
    conf = {"spark.hadoop.fs.defaultFS": "hdfs://nn:8020"}
    check_source("data/nope.parquet", "parquet", conf=conf)
    # a file: URI is still local
    assert "does not exist" in refused(f"file://{tmp_path}/nope", "parquet", conf=conf)


def test_spark_defaults_conf_default_fs(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "# a cluster's defaults\nspark.hadoop.fs.defaultFS   hdfs://namenode:8020\n"
    )
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    check_source("no/such/path.parquet", "parquet")  # HDFS's, not checked here
    check_source(str(tmp_path / "missing.parquet"), "parquet")  # an absolute path too
    assert "does not exist" in refused(f"file://{tmp_path}/missing.parquet", "parquet")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # SPARK_CONF_DIR wins: no file there
    assert "does not exist" in refused("no/such/path.parquet", "parquet")


def test_hadoop_conf_dir_core_site_default_fs(tmp_path, monkeypatch):
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://nn:8020</value>"
        "</property></configuration>"
    )
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    check_source("data/nope.parquet", "parquet")


def test_local_path():
    assert local_path("data/x.csv") == "data/x.csv"
    assert local_path("file:///tmp/a%20b.csv") == "/tmp/a b.csv"
    assert local_path("file:/tmp/x") == "/tmp/x"
    assert local_path("C:\\data\\x.csv") == "C:\\data\\x.csv"
    assert local_path("s3a://bucket/x") is None
    assert local_path("file://otherhost/x") is None


# --- the right format passes --------------------------------------------------------------------


def test_files_of_the_right_format_pass(tmp_path):
    check_source(parquet_file(tmp_path / "x.parquet"), "parquet")
    (tmp_path / "x.csv").write_text("id,name\n1,a\n")
    check_source(str(tmp_path / "x.csv"), "csv")
    check_source(str(tmp_path / "x.csv"), "text")
    (tmp_path / "x.json").write_text('\ufeff\n  {"id": 1}\n')
    check_source(str(tmp_path / "x.json"), "json")
    (tmp_path / "empty.csv").write_text("")
    check_source(str(tmp_path / "empty.csv"), "csv")


def test_a_spark_output_directory_passes(tmp_path):
    out = tmp_path / "out.parquet"
    out.mkdir()
    (out / "_SUCCESS").write_text("")
    (out / ".part-00000.parquet.crc").write_bytes(b"crc\x00\x01")
    parquet_file(out / "part-00000.parquet")
    check_source(str(out), "parquet")
    assert [os.path.basename(p) for p in data_files(str(out))] == ["part-00000.parquet"]


def test_a_partitioned_directory_is_sniffed_in_its_partitions(tmp_path):
    (tmp_path / "day=1").mkdir()
    parquet_file(tmp_path / "day=1" / "part-0.parquet")
    check_source(str(tmp_path), "parquet")
    message = refused(tmp_path, "csv")
    assert "day=1/part-0.parquet" in message and "is a Parquet file, not csv" in message


def test_compressed_text_is_left_to_spark(tmp_path):
    with gzip.open(tmp_path / "x.csv.gz", "wb") as fh:
        fh.write(b"id,name\n1,a\n" * 100)
    check_source(str(tmp_path / "x.csv.gz"), "csv")
    # gzip without the suffix: not refused as binary either
    os.rename(tmp_path / "x.csv.gz", tmp_path / "x.json")
    check_source(str(tmp_path / "x.json"), "json")


def test_a_delta_table_passes(tmp_path):
    (tmp_path / "_delta_log").mkdir()
    check_source(str(tmp_path), "delta")


# --- what is refused ------------------------------------------------------------------------------


def test_a_parquet_file_named_csv(tmp_path):
    path = parquet_file(tmp_path / "x.csv")
    message = refused(path, "csv")
    assert message == f"input {path!r} is a Parquet file, not csv: pass --format parquet"


@pytest.mark.parametrize(
    ("magic", "kind", "fmt"),
    [(b"ORC\x0a\x03", "orc", "parquet"), (b"Obj\x01\x04\x14", "avro", "json")],
)
def test_orc_and_avro_are_named(tmp_path, magic, kind, fmt):
    path = tmp_path / "data"
    end = b"ORC\x17" if kind == "orc" else b""  # an ORC file's postscript ends "ORC" + length
    path.write_bytes(magic + b"\x00" * 64 + end)
    assert refused(path, fmt).endswith(f", not {fmt}: pass --format {kind}")


def test_text_that_starts_like_orc_or_is_compressed_json_passes(tmp_path):
    import zlib

    from cdc_emitter.spark.sources import check_source

    (tmp_path / "ids.csv").write_text("ORCID,name\n0000-0001,Ann\n")
    check_source(str(tmp_path / "ids.csv"), "csv")
    (tmp_path / "d.json.deflate").write_bytes(zlib.compress(b'{"a": 1}\n'))
    check_source(str(tmp_path / "d.json.deflate"), "json")
    (tmp_path / "u.json").write_bytes('{"a": 1}\n'.encode("utf-16"))
    check_source(str(tmp_path / "u.json"), "json")
    (tmp_path / "c.json").write_text('// made by hand\n{"a": 1}\n')
    check_source(str(tmp_path / "c.json"), "json")


def test_text_read_as_parquet_says_what_it_looks_like(tmp_path):
    (tmp_path / "x.parquet").write_text("id,name\n1,a\n")
    assert refused(tmp_path / "x.parquet", "parquet").endswith(
        "is not a Parquet file: it is text: pass --format csv (or json, text)"
    )
    (tmp_path / "y.parquet").write_text('{"id": 1}\n')
    assert refused(tmp_path / "y.parquet", "parquet").endswith(
        "it looks like JSON lines: pass --format json"
    )


def test_a_truncated_parquet_file(tmp_path):
    path = parquet_file(tmp_path / "x.parquet")
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) - 10)
    assert "is not a complete Parquet file" in refused(path, "parquet")


def test_an_empty_file_is_no_parquet(tmp_path):
    (tmp_path / "x.parquet").write_bytes(b"")
    assert "it is empty" in refused(tmp_path / "x.parquet", "parquet")


def test_binary_is_not_text(tmp_path):
    (tmp_path / "x.csv").write_bytes(b"\x07\x00\x01\x02 some bytes \x00")
    message = refused(tmp_path / "x.csv", "csv")
    assert "is not text" in message and "not csv" in message


def test_text_in_a_declared_wide_encoding_is_text(tmp_path):
    """UTF-16 without a byte order mark has a NUL in every ASCII character: with -O encoding
    (or Spark's alias charset) it is the text the user says it is; without, it looks binary."""
    (tmp_path / "x.csv").write_bytes("id,name\n1,a\n".encode("utf-16-le"))
    (tmp_path / "x.json").write_bytes('{"id": 1}\n'.encode("utf-32-be"))
    (tmp_path / "y.json").write_bytes("id,name\n1,a\n".encode("utf-16-le"))
    wide = {"encoding": "UTF-16LE", "multiLine": "true"}
    check_source(str(tmp_path / "x.csv"), "csv", options=wide)
    check_source(
        str(tmp_path / "x.csv"), "csv", options={"CharSet": "utf_16le", "multiline": "TRUE"}
    )
    check_source(str(tmp_path / "x.json"), "json", options={"encoding": "UTF-32BE"})
    check_source(str(tmp_path / "x.csv"), "csv", options={"encoding": "x-java-only-name"})
    assert refused(tmp_path / "x.csv", "csv").endswith(
        "is not text (it has NUL bytes in its first 4 KiB and is not gzip-compressed), so not "
        "csv: it looks like UTF-16LE text without a byte order mark: pass -O encoding=UTF-16LE "
        "-O multiLine=true"
    )
    assert "is not JSON lines (it starts with 'id,name'" in refused(
        tmp_path / "y.json", "json", options={"encoding": "UTF-16LE"}
    )
    parquet_file(tmp_path / "p.csv")  # an encoding makes no Parquet file text
    assert "--format parquet" in refused(tmp_path / "p.csv", "csv", options={"encoding": "utf-8"})


@pytest.mark.parametrize("encoding", ["UTF-16LE", "utf-16", "UTF-32"])
def test_csv_in_a_wide_encoding_needs_multiline(tmp_path, encoding):
    """Spark cuts CSV lines at single newline bytes unless multiLine is on: UTF-16 and UTF-32
    rows would be read as garbage, silently (measured on Spark 4.1: rows like '\\u3100...')."""
    path = tmp_path / "x.csv"
    path.write_bytes("id,name\n1,a\n".encode(encoding.lower().replace("le", "-le")))
    assert refused(path, "csv", options={"encoding": encoding}) == (
        f"input {str(path)!r} is read as {encoding} one line at a time, which Spark cuts at "
        "single '\\n' bytes, mid-character: every row would be garbage; add -O multiLine=true"
    )
    check_source(str(path), "csv", options={"encoding": encoding, "multiLine": "true"})
    check_source(str(path), "csv", options={"encoding": encoding, "lineSep": "\n"})


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_csv_with_a_wide_byte_order_mark_needs_its_encoding(tmp_path, encoding):
    path = tmp_path / "x.csv"
    path.write_bytes("id,name\n1,a\n".encode(encoding))  # Python writes the BOM
    name = encoding.upper()
    assert refused(path, "csv") == (
        f"input {str(path)!r} is {name} text (it starts with a byte order mark); read as UTF-8 "
        f"every row would be garbage: pass -O encoding={name} -O multiLine=true"
    )
    check_source(str(path), "csv", options={"encoding": name, "multiLine": "true"})
    check_source(str(path), "text")  # text and json are left to Spark


def test_json_that_is_not_json_lines(tmp_path):
    (tmp_path / "x.json").write_text("id,name\n1,a\n")
    message = refused(tmp_path / "x.json", "json")
    assert "is not JSON lines (it starts with 'id,name'" in message


def test_a_directory_without_data_files(tmp_path):
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".part-0.crc").write_text("x")
    (tmp_path / "_temporary").mkdir()
    (tmp_path / "_temporary" / "part-0.parquet").write_text("x")
    assert "holds no data files" in refused(tmp_path, "parquet")


def test_a_directory_that_is_no_delta_table(tmp_path):
    parquet_file(tmp_path / "part-0.parquet")
    message = refused(tmp_path, "delta")
    assert "is not a Delta table (it has no _delta_log/ directory)" in message
    assert message.endswith("it holds Parquet files, pass --format parquet")


def test_a_delta_table_read_as_files(tmp_path):
    (tmp_path / "_delta_log").mkdir()
    parquet_file(tmp_path / "part-0.parquet")
    assert (
        "is a Delta table (it has _delta_log/), not plain parquet files: pass --format delta"
        in (refused(tmp_path, "parquet"))
    )


def test_a_file_is_no_delta_table(tmp_path):
    path = parquet_file(tmp_path / "x.parquet")
    message = refused(path, "delta")
    assert "is a file, not a Delta table" in message and "pass --format parquet" in message
