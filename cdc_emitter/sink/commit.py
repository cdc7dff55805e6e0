"""After a batch's rows are checked: its progress statement as messages (the claim that
`cdc_emitter.sink.claim` places) and its interval recorded in the sink log.

Guarantees:

- the first record of a batch id in the sink log wins; another interval recorded there fails
  the sink's next batch (or ``close``) with `CdcError`. The record is written by a thread
  started once the batch's claim is in the topic (`record_later`), while its updates are;
- a statement counting more times than one message holds is written as several that tile the
  interval, each naming the batch's interval; the digest goes on the last, so a re-run finds
  one only when every statement of its first attempt is in the topic.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from cdc_emitter.errors import CdcError
from cdc_emitter.protocol.headers import (
    HEADER_BATCH,
    HEADER_BATCH_LOWER,
    HEADER_BATCH_UPPER,
    HEADER_DIGEST,
    HEADER_KIND,
    HEADER_LOWER,
    HEADER_SCHEMA,
    HEADER_SHAPE,
    HEADER_UPPER,
    HEADER_WRITER,
)
from cdc_emitter.protocol.updates import progress_from_counts, split_progress
from cdc_emitter.sink.batch import Batch, Checked, Written
from cdc_emitter.sink.digest import format_digest
from cdc_emitter.sink.log import DataFrameSinkLog, SinkLog, SinkLogEntry
from cdc_emitter.spark.errors import spark_error_text

log = logging.getLogger("cdc_emitter.sink")  # CdcSink's logger: one name for the sink's lines

#: A progress message: its value and its headers.
Message = tuple[bytes, list[tuple[str, bytes]]]


class PendingRecord:
    """A batch's interval being recorded in the sink log by a thread of its own
    (`record_later`); `wait` joins it and raises what it raised."""

    def __init__(self, record: Callable[[], None], name: str) -> None:
        self._error: BaseException | None = None
        # not a daemon: a process that ends right after its last batch still records it
        self._thread = threading.Thread(target=self._run, args=(record,), name=name)
        self._thread.start()

    def _run(self, record: Callable[[], None]) -> None:
        try:
            record()
        except BaseException as exc:  # noqa: BLE001 - kept for `wait` to raise
            self._error = exc
            # said now as well: a process may end before anything waits for it
            log.warning("%s", exc)

    def wait(self) -> None:
        """Wait until the record is written.

        Raises:
            CdcError: The record could not be written, or another interval was recorded.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error


def record_later(
    sinklog: SinkLog | DataFrameSinkLog | None, batch: Batch, upper: int | None, topic: str
) -> PendingRecord | None:
    """Record the batch's interval in the sink log — a new batch's, or a re-run's that was
    found in the topic's claims, not in the log — by a thread of its own, started once the
    batch's claim is in the topic. The first record of a batch id wins: another interval found
    there is an error.

    The record is written while the updates are, and the batch does not wait for the file
    system (a record took 18 ms on a local disk, more on an object store). The sink waits for
    it before its next batch, and on `close` (also after a failed write), so a record can be
    missing only after a crash of the process within the batch — and a re-run that finds none
    looks for its claim in the topic (the record of the batch before tells how far back).
    None when there is nothing to record."""
    if sinklog is None or batch.logged or batch.batch_id is None:
        return None

    entry = SinkLogEntry(batch.batch_id, batch.lower, upper, batch.time, batch.writer, topic)

    def record() -> None:
        try:
            kept = sinklog.put(entry)
        except Exception as exc:  # noqa: BLE001 - raised by the next batch: name this one
            raise CdcError(
                f"{batch.what}: its interval could not be recorded in the sink log "
                f"{sinklog.location}: {spark_error_text(exc)}"
            ) from exc
        if (kept.lower, kept.upper) != (batch.lower, upper):  # someone else decided first
            raise CdcError(
                f"{batch.what}: the sink log already records interval "
                f"[{kept.lower}, {kept.upper}) for this batch; retry the batch"
            )

    return PendingRecord(record, f"cdc-emitter sink log: {batch.what}")


def times_per_statement(max_message_bytes: int) -> int:
    """How many counted times one progress statement may hold: a count is a record of two
    longs (at most 20 bytes in Avro), and the message keeps 1 KiB for the rest."""
    return max(1, (max_message_bytes - 1024) // 20)


def progress_messages(
    batch: Batch,
    upper: int | None,
    written: Written,
    checked: Checked | None,
    max_message_bytes: int,
) -> tuple[list[Message], str]:
    """The batch's progress statement as messages to partition 0, and its digest text: with,
    when ``checked`` knows them, the batch's rows, groups and bytes (`HEADER_SHAPE`)."""
    counts, lower = written.counts, batch.lower
    progress = progress_from_counts(lower, upper, counts)  # counts lie inside: validated
    digest_text = format_digest(written.digest, counts)
    common = statement_headers(batch, checked)
    # a statement counting more times than one message holds is written as several that
    # tile the interval, each naming the batch's interval; the digest goes on the last
    statements = split_progress(progress, times_per_statement(max_message_bytes))
    batch_interval = (
        []
        if len(statements) == 1
        else [
            (HEADER_BATCH_LOWER, str(lower).encode()),
            (HEADER_BATCH_UPPER, b"" if upper is None else str(upper).encode()),
        ]
    )
    values = [batch.codec.encode_progress(statement) for statement in statements]
    messages = []
    for n, (statement, value) in enumerate(zip(statements, values), 1):
        headers = [
            *common,
            (HEADER_LOWER, str(statement.lower[0]).encode()),
            (HEADER_UPPER, str(statement.upper[0]).encode() if statement.upper else b""),
            *batch_interval,
        ]
        if n == len(statements):
            headers.append((HEADER_DIGEST, digest_text.encode()))
        messages.append((value, headers))
    return messages, digest_text


def statement_headers(batch: Batch, checked: Checked | None) -> list[tuple[str, bytes]]:
    """The headers every statement of the batch carries: writer, data schema, batch id, shape."""
    common = [
        (HEADER_KIND, b"progress"),
        (HEADER_WRITER, batch.writer.encode()),
        (HEADER_SCHEMA, json.dumps(batch.avro_data, separators=(",", ":")).encode()),
    ]
    if batch.batch_id is not None:
        common.append((HEADER_BATCH, str(batch.batch_id).encode()))
    if checked is not None and checked.rows and checked.bytes:
        common.append(
            (
                HEADER_SHAPE,
                json.dumps(
                    {"rows": checked.rows, "groups": checked.groups, "bytes": checked.bytes},
                    separators=(",", ":"),
                ).encode(),
            )
        )
    return common
