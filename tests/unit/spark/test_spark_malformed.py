"""Malformed csv and json records: the line Spark's FAILFAST mode refuses, found again in Python
(find_malformed_line), and Spark's failure phrased with it (malformed_input_error) — no Spark
needed: the failures are Spark 4.1's and 3.5's texts."""

from __future__ import annotations

import gzip

import pytest

from cdc_emitter.errors import CdcError, ConfigError
from cdc_emitter.spark.malformed import find_malformed_line
from cdc_emitter.spark.tables import malformed_input_error, strict_options

GARBLED = 'id,name,price\n1,apple,1.5\n\n2,"banana, ripe",2.0\n3,"unterminated,4.0\n4,cherry,3.0\n'


def spark4_failure(uri: str, record: str) -> Exception:
    """What a collect of a garbled csv raises in Spark 4.1 (Py4J's text: the Java trace)."""
    return Exception(
        "An error occurred while calling o34.collectToPython.\n"
        f": org.apache.spark.SparkException: [FAILED_READ_FILE.NO_HINT] Encountered error while "
        f"reading file {uri}.  SQLSTATE: KD001\n\tat org.apache.spark...\n"
        "Caused by: org.apache.spark.SparkException: [MALFORMED_RECORD_IN_PARSING.WITHOUT_"
        "SUGGESTION] Malformed records are detected in record parsing: [3,unterminated,4.0,null].\n"
        "Parse Mode: FAILFAST. To process malformed records as null result, try setting the "
        "option 'mode' as 'PERMISSIVE'.  SQLSTATE: 22023\n"
        "Caused by: org.apache.spark.SparkRuntimeException: [MALFORMED_CSV_RECORD] Malformed CSV "
        f"record: {record} SQLSTATE: KD000\n\t... 25 more"
    )


JSON_AT_LOAD = Exception(  # json's schema inference meets it at load: no file named
    "An error occurred while calling o98.load.\n: org.apache.spark.SparkException: "
    "[MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION] Malformed records are detected in record "
    "parsing: _corrupt_record.\nParse Mode: FAILFAST. To process malformed records as null "
    "result, try setting the option 'mode' as 'PERMISSIVE'.  SQLSTATE: 22023"
)
SPARK35 = Exception(
    "An error occurred while calling o52.collectToPython.\n: org.apache.spark.SparkException: "
    "Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times, most recent failure: "
    "Lost task 0.0 in stage 1.0 (TID 1): org.apache.spark.SparkException: Malformed records "
    "are detected in record parsing. Parse Mode: FAILFAST. To process malformed records as null "
    "result, try setting the option 'mode' as 'PERMISSIVE'."
)


# --- find_malformed_line ----------------------------------------------------------------------


def test_csv_first_line_whose_fields_differ_from_the_header(tmp_path):
    (tmp_path / "x.csv").write_text(GARBLED)
    found = find_malformed_line(str(tmp_path / "x.csv"), "csv", {"header": "true"})
    assert found is not None
    assert (found.number, found.text) == (5, '3,"unterminated,4.0')
    assert found.reason == "2 fields, the header has 3"


def test_csv_extra_fields_without_header(tmp_path):
    (tmp_path / "x.csv").write_text("1,a\n2,b\n3,c,d\n")
    found = find_malformed_line(str(tmp_path / "x.csv"), "csv", {})
    assert found is not None and found.number == 3
    assert found.reason == "3 fields, the first line has 2"


def test_csv_options_shape_the_fields(tmp_path):
    (tmp_path / "x.csv").write_text("# a comment, with commas\nid;name\n1;'a;b'\n2;c;d\n")
    options = {"SEP": ";", "Quote": "'", "comment": "#", "header": "true"}
    found = find_malformed_line(str(tmp_path / "x.csv"), "csv", options)
    assert found is not None and (found.number, found.text) == (4, "2;c;d")
    assert find_malformed_line(str(tmp_path / "x.csv"), "csv", {"sep": "\\t"}) is None


def test_csv_well_formed(tmp_path):
    (tmp_path / "x.csv").write_text('id,name\n1,"a, b"\n2,"say ""hi"""\n\n3,c\n')
    assert find_malformed_line(str(tmp_path / "x.csv"), "csv", {"header": "true"}) is None


def test_csv_multiline_records_span_lines(tmp_path):
    (tmp_path / "x.csv").write_text('id,note\n1,"two\nlines"\n2,ok\n3,x,y\n')
    options = {"header": "true", "multiLine": "true"}
    found = find_malformed_line(str(tmp_path / "x.csv"), "csv", options)
    assert found is not None and (found.number, found.text) == (5, "3,x,y")


def test_the_record_spark_quotes_is_the_one(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n3,4\n")
    found = find_malformed_line(str(tmp_path / "x.csv"), "csv", {}, record="3,4")
    assert found is not None and found.number == 3


def test_json_lines(tmp_path):
    (tmp_path / "x.json").write_text('{"a": 1}\n\n{\'a\': 2}\n[{"a": 3}]\n{"a": 4\n{"a": 5}\n')
    found = find_malformed_line(str(tmp_path / "x.json"), "json", {})
    assert found is not None and (found.number, found.text) == (5, '{"a": 4')
    assert found.reason.startswith("Expecting")
    (tmp_path / "y.json").write_text('{"a": 1}\n42\n')
    found = find_malformed_line(str(tmp_path / "y.json"), "json", {})
    assert found is not None and found.number == 2 and "not an object" in found.reason


def test_json_multiline_document(tmp_path):
    (tmp_path / "x.json").write_text('[\n  {"a": 1},\n  {"a": 2,,}\n]\n')
    found = find_malformed_line(str(tmp_path / "x.json"), "json", {"multiline": "true"})
    assert found is not None and found.number == 3


def test_a_directory_and_gzip_files(tmp_path):
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "part-0.csv").write_text("a,b\n1,2\n")
    with gzip.open(tmp_path / "part-1.csv.gz", "wt") as fh:
        fh.write("a,b\n1,2,3\n")
    found = find_malformed_line(str(tmp_path), "csv", {})
    assert found is not None and found.path.endswith("part-1.csv.gz") and found.number == 2


def test_too_big_or_other_formats_find_nothing(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2,3\n")
    assert find_malformed_line(str(tmp_path / "x.csv"), "csv", {}, max_bytes=4) is None
    assert find_malformed_line(str(tmp_path / "x.csv"), "text", {}) is None
    assert find_malformed_line(str(tmp_path / "nope.csv"), "csv", {}) is None


# --- malformed_input_error ------------------------------------------------------------------


def test_strict_options_unless_a_mode_is_given():
    assert strict_options("csv", {"header": "true"}) == {"header": "true", "mode": "FAILFAST"}
    assert strict_options("json", {"Mode": "PERMISSIVE"}) == {"Mode": "PERMISSIVE"}
    assert strict_options("parquet", {}) == {}


def test_spark4_failure_names_the_file_line_and_opt_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.csv").write_text(GARBLED)
    exc = spark4_failure(f"file://{tmp_path}/x.csv", '3,"unterminated,4.0')
    error = malformed_input_error(exc, "x.csv", "csv", {"header": "true", "mode": "FAILFAST"})
    assert isinstance(error, ConfigError)
    assert str(error) == (
        "malformed csv record in 'x.csv' at line 5 (2 fields, the header has 3): "
        "'3,\"unterminated,4.0'; fix the file, or pass -O mode=PERMISSIVE to read malformed "
        "records as nulls (-O mode=DROPMALFORMED to skip them)"
    )


def test_the_file_of_a_directory_and_of_previous(tmp_path):
    (tmp_path / "now").mkdir()
    (tmp_path / "now" / "part-0.csv").write_text("a,b\n1,2\n")
    (tmp_path / "before").mkdir()
    (tmp_path / "before" / "part-0.csv").write_text("a,b\n1,2\n" + "x" * 200 + ",3,4\n")
    now, before = str(tmp_path / "now"), str(tmp_path / "before")
    exc = spark4_failure(f"file://{before}/part-0.csv", "whatever")
    message = str(malformed_input_error(exc, [now, before], "csv", {}))
    assert f"in '{before}/part-0.csv' at line 3 (3 fields, the first line has 2): 'xxx" in message
    assert "… (124 more characters)'; fix the file" in message  # the line cut, saying how much


def test_json_at_load_names_no_file_each_source_is_scanned(tmp_path):
    (tmp_path / "now.json").write_text('{"a": 1}\n')
    (tmp_path / "before.json").write_text('{"a": 1}\n{"a" 2}\n')
    now, before = str(tmp_path / "now.json"), str(tmp_path / "before.json")
    message = str(malformed_input_error(JSON_AT_LOAD, [now, before, None], "json", {}))
    assert f"in '{before}' at line 2 (Expecting ':' delimiter at column 6): " in message


def test_spark_35_json_inference_failure_is_ours_too(tmp_path):
    """Spark 3.5 says it differently when json's schema inference meets the record (seen on a
    live 3.5.7 session: the copied strings above are Spark 4's)."""
    (tmp_path / "bad.json").write_text('{"a": 1}\n{"a": 2\n')
    spark35 = Exception(
        "An error occurred while calling o51.json.\n: org.apache.spark.SparkException: Job "
        "aborted due to stage failure: ... (executor driver): org.apache.spark.SparkException: "
        "Malformed records are detected in schema inference. Parse Mode: FAILFAST."
    )
    message = str(malformed_input_error(spark35, str(tmp_path / "bad.json"), "json", {}))
    assert message.startswith(f"malformed json record in '{tmp_path}/bad.json' at line 2 (")


def test_without_a_local_file_spark_s_record_is_quoted(tmp_path):
    exc = spark4_failure("s3a://bucket/x.csv", "3,x,y")
    assert str(malformed_input_error(exc, "s3a://bucket/x.csv", "csv", {})).startswith(
        "malformed csv record in 's3a://bucket/x.csv': '3,x,y'; fix the file, or pass "
        "-O mode=PERMISSIVE"
    )
    message = str(malformed_input_error(SPARK35, "s3a://bucket/x.csv", "csv", {}))
    assert message.startswith("malformed csv record in 's3a://bucket/x.csv'; fix the file")


def test_a_cause_behind_our_own_error_is_seen(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2,3\n")
    try:
        try:
            raise spark4_failure(f"file://{tmp_path}/x.csv", "1,2,3")
        except Exception as exc:
            raise CdcError("the batch failed") from exc
    except CdcError as ours:
        error = malformed_input_error(ours, str(tmp_path / "x.csv"), "csv", {})
    assert error is not None and "at line 2" in str(error)


@pytest.mark.parametrize("fmt", ["parquet", "text", "avro"])
def test_other_formats_and_other_failures_are_not_ours(fmt):
    assert malformed_input_error(SPARK35, "x", fmt, {}) is None
    assert malformed_input_error(RuntimeError("Connection refused"), "x.csv", "csv", {}) is None
