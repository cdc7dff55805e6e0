"""A stopped query's interrupted batch: a short error whose text both Spark 3.5's and Spark 4's
stream thread take for a stop (`interrupted_batch`)."""

from __future__ import annotations

import re

import pytest

from cdc_emitter.errors import InterruptedBatchError
from cdc_emitter.sink.interrupted import interrupted_batch

_NAMES = (
    r"java\.lang\.InterruptedException|java\.io\.InterruptedIOException"
    r"|java\.nio\.channels\.ClosedByInterruptException"
)
#: Spark's ``StreamExecution.PROXY_ERROR``: a Python proxy's error is a stop when its text
#: matches it (read from the 3.5.7 and 4.x jars).
PROXY_ERROR_4 = re.compile(
    r"py4j\.protocol\.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
    rf"({_NAMES})"
)
PROXY_ERROR_35 = re.compile(
    rf"py4j\.protocol\.Py4JJavaError: An error occurred while calling.+(\r\n|\r|\n): ({_NAMES})"
)


class FakePy4JJavaError(Exception):
    """What the function reads of a Py4JJavaError: its text, and that it has a Java side."""

    java_exception = object()


@pytest.mark.parametrize(
    "java",
    [
        "java.lang.InterruptedException\n\tat java.base/java.lang.Object.wait(Native Method)",
        "org.apache.spark.SparkException: Job 12 cancelled part of cancelled job group abc\n\tat x",
    ],
    ids=["interrupted", "job-cancelled"],
)
def test_the_short_text_reads_as_a_stop(java):
    error = FakePy4JJavaError(f"An error occurred while calling o94.save.\n: {java}")
    stopped = interrupted_batch(RuntimeError("wrapped"), "topic 't' batch 3")
    assert stopped is None  # not a Py4J error
    try:
        raise RuntimeError("the sink's own") from error
    except RuntimeError as exc:
        stopped = interrupted_batch(exc, "topic 't' batch 3")
    assert isinstance(stopped, InterruptedBatchError)
    text = str(stopped)
    assert text.startswith("topic 't' batch 3 was interrupted: its streaming query was stopped")
    last = "\n".join(text.splitlines()[-2:])
    assert last.startswith(
        "py4j.protocol.Py4JJavaError: An error occurred while calling o94.save.\n: "
        "java.lang.InterruptedException"
    )
    assert PROXY_ERROR_4.search(text) and PROXY_ERROR_35.search(text), last
    assert len(last) < 500


def test_another_java_error_is_not_a_stop():
    error = FakePy4JJavaError("An error occurred while calling o94.save.\n: java.io.IOException: x")
    assert interrupted_batch(error, "topic 't' batch 3") is None
