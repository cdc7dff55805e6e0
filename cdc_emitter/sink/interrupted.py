"""A ``foreachBatch`` batch interrupted by its query's stop, told from a failure.

Spark's stream thread takes a stopped query's interruption for a stop only when the
``foreachBatch`` function's error text ends a certain way; a Py4J error's whole Java stack trace
breaks that match. `interrupted_batch` gives such an error the short text Spark looks for.
"""

from __future__ import annotations

import re

from cdc_emitter.errors import InterruptedBatchError, shorten

__all__ = ["interrupted_batch"]

#: What a stopped query's interruption looks like in the Java error behind a Py4J call: the Java
#: exceptions Spark takes for an interruption (``StreamExecution.IO_EXCEPTION_NAMES``), or the
#: cancellation of a job.
_INTERRUPTION = re.compile(
    r"java\.lang\.InterruptedException|java\.io\.InterruptedIOException"
    r"|java\.nio\.channels\.ClosedByInterruptException"
    r"|org\.apache\.spark\.SparkException: Job \d+ cancelled\b[^\n]*"
)


def interrupted_batch(exc: BaseException, what: str) -> InterruptedBatchError | None:
    """A short `InterruptedBatchError` for ``exc`` when it (or an error it was raised from) is a
    Py4J error whose Java side was interrupted or whose job was cancelled; else None.

    Spark's stream thread tells a stopped query's interruption from a failure by matching the
    text of the ``foreachBatch`` function's Python traceback against
    ``py4j.protocol.Py4JJavaError: An error occurred while calling(.|\\n)*InterruptedException``
    (SPARK-39218, SPARK-48717). A Py4J error's text carries the whole Java stack trace, and that
    regex overflows the stream thread's stack on about a thousand characters after its first
    words: the query then ends with 1,000 lines of ``java.lang.StackOverflowError`` instead of
    quietly. This error's text names the Py4J call and the Java exception in its last two lines,
    a few hundred characters — the only text after those words — in the form Spark 3.5's regex
    wants too (``calling .+<newline>: java.lang.InterruptedException``), and it is raised without
    its cause.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "java_exception", None) is not None:  # a Py4JJavaError
            try:
                text = str(current)
            except Exception:  # noqa: BLE001 - the JVM may be gone
                text = ""
            found = _INTERRUPTION.search(text)
            if found is not None:
                # its first line: "An error occurred while calling o94.save."
                call = text.split("\n", 1)[0].strip().rstrip(".")
                cause = shorten(found.group(0), 300)
                if "Interrupt" not in cause:
                    # Spark 3.5 takes only these names for a stop (a cancelled job it misses);
                    # a query that was not stopped still fails with this error (isInterruptedByStop)
                    cause = f"java.lang.InterruptedException (taken for {cause})"
                return InterruptedBatchError(
                    f"{what} was interrupted: its streaming query was stopped (or its Spark job "
                    "cancelled) while the batch was being written. Restarted from its checkpoint, "
                    "the query writes the batch again; if its progress statement was claimed, "
                    "readers wait on its times until then.\n"
                    # Spark 3.5 reads "calling<...><newline>: <name>", Spark 4 "calling<...><name>"
                    f"py4j.protocol.Py4JJavaError: {shorten(call, 100)}.\n: {cause}"
                )
        current = current.__cause__ or current.__context__
    return None
