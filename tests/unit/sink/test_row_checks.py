"""Our errors found again in a failed Spark job's text (`task_error`): pure, no Spark session."""

from __future__ import annotations

from cdc_emitter.errors import BadInputError, LateUpdateError
from cdc_emitter.sink.row_checks import BATCH, BATCH_TIME, task_error


def test_the_last_marked_message_comes_back_as_our_error_with_the_batch_put_back():
    text = (
        "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] "
        f"[cdc-emitter:BadInputError] {BATCH}: null diff in column 'diff' (e.g. row "
        '{"k":1}) SQLSTATE: P0001\n\tat org.apache.spark...\n'
        "Caused by: [USER_RAISED_EXCEPTION] [cdc-emitter:LateUpdateError] "
        f"{BATCH}: update at time {BATCH_TIME} is late SQLSTATE: P0001\n"
    )
    found = task_error(RuntimeError(text), "topic 't' batch 7", time=3)
    assert type(found) is LateUpdateError
    assert str(found) == "topic 't' batch 7: update at time 3 is late"


def test_an_unknown_kind_is_a_bad_input_error_and_an_unmarked_failure_is_not_ours():
    found = task_error(RuntimeError("[cdc-emitter:Other] x of @cdc-emitter-batch@"), "b")
    assert type(found) is BadInputError and str(found) == "x of b"
    assert task_error(RuntimeError("java.lang.OutOfMemoryError"), "b") is None
