"""Spark's errors, made readable: the first line of what Spark says.

Pure: imports no Spark, so that any layer may phrase a Spark error without starting one.

Guarantees: `spark_error_text` never raises and never returns an empty string.
"""

from __future__ import annotations

import re

__all__ = ["spark_error_text"]


def spark_error_text(exc: BaseException) -> str:
    """The first line of what Spark says about ``exc``.

    Args:
        exc: An exception raised by Spark (or any other).

    Returns:
        The first line of the Java exception behind a Py4J error, else of ``str(exc)``; the
        exception's type name when both are empty.
    """
    java = getattr(exc, "java_exception", None)
    text = ""
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone
            text = ""
    text = (text or str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


#: How a cdc-emitter error raised in Spark's Python worker (a Python data source, a
#: foreachBatch function) shows in the traceback Spark passes on.
_OURS_IN_TRACEBACK = re.compile(r"cdc_emitter\.errors\.(\w+): (.+)")


def python_worker_error(exc: BaseException) -> str | None:
    """The message of a cdc-emitter error raised in one of Spark's Python workers (a Python
    data source's reader, a foreachBatch function), found in the traceback Spark's error
    carries; None when there is none. The last one is the one that ended the worker."""
    found = _OURS_IN_TRACEBACK.findall(str(exc))
    return found[-1][1].strip() if found else None
