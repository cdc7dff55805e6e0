"""The sink log: the interval each batch was given, kept beside the Spark checkpoint.

One small JSON file per batch id under ``<checkpoint>/cdc-emitter-sink/``::

    {"version": 1, "batch_id": 7, "lower": 12, "upper": 15, "time": 14, "writer": "…", "topic": "…"}

(``upper`` is null when the batch closed the history; ``time`` is the batch's time in the
default time mode, null in column mode.)

The log lives wherever the checkpoint lives (local disk, HDFS, S3, ABFS…). In a classic
session, file access goes through Hadoop's FileSystem API via the Spark JVM gateway: a record is
written to a temporary file and renamed into place, so a reader never sees half a record, and
old records are pruned, keeping the newest `KEEP` batch ids. On Spark Connect, which has no
JVM gateway, each record is a one-row text dataset written with the DataFrame API in
``error`` (if-exists) mode and read back (not pruned). Either way a record that is already there is
never overwritten: the first decision for a batch id wins, which is the point.
"""

from __future__ import annotations

import bisect
import json
import logging
import uuid
from typing import Any, NamedTuple

from cdc_emitter.errors import CdcError
from cdc_emitter.spark.errors import spark_error_text

__all__ = [
    "SinkLog",
    "DataFrameSinkLog",
    "SinkLogEntry",
    "KEEP",
    "open_sink_log",
    "is_connect",
    "query_id_from_checkpoint",
]

log = logging.getLogger(__name__)

#: How many batch records to keep (Spark re-runs at most the last uncommitted batch).
KEEP = 100
DIRNAME = "cdc-emitter-sink"


class SinkLogEntry(NamedTuple):
    batch_id: int
    lower: int
    upper: int | None  # None: the batch closed the history
    time: int | None = None
    writer: str | None = None
    topic: str | None = None

    def to_json(self) -> str:
        return json.dumps({"version": 1, **self._asdict()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SinkLogEntry:
        obj = json.loads(text)
        return cls(
            int(obj["batch_id"]),
            int(obj["lower"]),
            None if obj.get("upper") is None else int(obj["upper"]),
            None if obj.get("time") is None else int(obj["time"]),
            obj.get("writer"),
            obj.get("topic"),
        )

    @classmethod
    def from_lines(cls, lines: list[str], where: str) -> SinkLogEntry:
        """The record stored as ``lines`` at ``where``; `CdcError` naming it if unreadable."""
        try:
            return cls.from_json("\n".join(lines))
        except (ValueError, KeyError, TypeError) as exc:
            raise CdcError(f"sink log record {where} is unreadable: {exc}") from exc


class SinkLog:
    """Batch intervals under ``<checkpoint_location>/cdc-emitter-sink`` (Hadoop FileSystem)."""

    def __init__(
        self,
        spark: Any,
        checkpoint_location: str,
        keep: int = KEEP,
        *,
        dirname: str = DIRNAME,
        entry_type: Any = SinkLogEntry,
    ) -> None:
        self.location = str(checkpoint_location).rstrip("/") + "/" + dirname
        self.keep = keep
        self._entry = entry_type
        jvm = spark._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._dir = self._Path(self.location)
        self._fs = self._dir.getFileSystem(spark._jsc.hadoopConfiguration())
        self._jvm = jvm
        # the batch ids recorded, oldest first: listed by the first put, then kept (see put)
        self._ids: list[int] | None = None

    def _path(self, batch_id: int):
        return self._Path(self._dir, str(int(batch_id)))

    def get(self, batch_id: int) -> SinkLogEntry | None:
        """The recorded interval of ``batch_id``, or None if none was recorded."""
        path = self._path(batch_id)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            reader = self._jvm.java.io.BufferedReader(
                self._jvm.java.io.InputStreamReader(stream, "UTF-8")
            )
            lines = []
            while True:
                line = reader.readLine()
                if line is None:
                    break
                lines.append(line)
        finally:
            stream.close()
        return self._entry.from_lines(lines, f"{self.location}/{batch_id}")

    def put(self, entry: SinkLogEntry) -> SinkLogEntry:
        """Record ``entry`` atomically unless a record for its batch id exists; returns the record kept."""
        existing = self.get(entry.batch_id)
        if existing is not None:
            return existing
        if self._ids is None:
            self._fs.mkdirs(self._dir)
        tmp = self._Path(self._dir, f".{entry.batch_id}.{uuid.uuid4().hex}.tmp")
        out = self._fs.create(tmp, True)
        try:
            out.write(bytearray(entry.to_json().encode("utf-8")))
            out.hflush()
        finally:
            out.close()
        if not self._fs.rename(tmp, self._path(entry.batch_id)):
            # rename refuses to replace: someone recorded this batch first — theirs wins
            self._fs.delete(tmp, False)
            existing = self.get(entry.batch_id)
            if existing is None:
                raise CdcError(f"cannot write sink log record {self.location}/{entry.batch_id}")
            return existing
        self._keep_newest(entry.batch_id)
        return entry

    def batch_ids(self) -> list[int]:
        if not self._fs.exists(self._dir):
            return []
        ids = []
        for status in self._fs.listStatus(self._dir):
            name = status.getPath().getName()
            if name.isdigit():
                ids.append(int(name))
        return sorted(ids)

    def latest(self) -> SinkLogEntry | None:
        ids = self.batch_ids()
        return self.get(ids[-1]) if ids else None

    def _keep_newest(self, batch_id: int) -> None:
        """Delete the records older than the newest ``keep`` batch ids, ``batch_id`` just
        recorded. The directory is listed once, by this log's first record (whatever an earlier
        run left); after that the ids are kept here, as listing costs a JVM round trip per
        record: about 100 ms a batch once ``keep`` records are there."""
        if self._ids is None:
            self._ids = self.batch_ids()
        elif batch_id not in self._ids:
            bisect.insort(self._ids, batch_id)
        if len(self._ids) > self.keep:
            old, self._ids = self._ids[: -self.keep], self._ids[-self.keep :]
            for stale in old:
                self._fs.delete(self._path(stale), False)
            log.debug("sink log %s pruned to %d records", self.location, self.keep)


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (no JVM gateway, no SparkContext)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def open_sink_log(
    spark: Any, checkpoint_location: str, *, dirname: str = DIRNAME, entry_type: Any = SinkLogEntry
) -> SinkLog | DataFrameSinkLog:
    """The sink log for ``checkpoint_location``, in the way the session allows. ``dirname`` and
    ``entry_type`` (a record with ``batch_id``, ``to_json()`` and ``from_lines()``) keep another
    per-batch log the same way (a converter's decisions)."""
    if is_connect(spark):
        return DataFrameSinkLog(spark, checkpoint_location, dirname=dirname, entry_type=entry_type)
    return SinkLog(spark, checkpoint_location, dirname=dirname, entry_type=entry_type)


def query_id_from_checkpoint(spark: Any, checkpoint_location: str) -> str:
    """The id of the streaming query whose checkpoint this is (Spark's ``<checkpoint>/metadata``,
    written when the query first starts and kept across restarts) — through the DataFrame API,
    so a Spark Connect session can read it."""
    path = str(checkpoint_location).rstrip("/") + "/metadata"
    try:
        lines = [r[0] for r in spark.read.text(path).collect()]
        return str(json.loads("\n".join(lines))["id"])
    except Exception as exc:  # noqa: BLE001 - missing file, or not a query's metadata
        raise CdcError(
            f"cannot read the streaming query's id from {path} ({spark_error_text(exc)}): "
            "pass checkpoint_location= the query's own checkpoint location, or writer_id="
        ) from None


class DataFrameSinkLog:
    """The sink log through the DataFrame API only (Spark Connect): one text dataset per record."""

    def __init__(
        self,
        spark: Any,
        checkpoint_location: str,
        *,
        dirname: str = DIRNAME,
        entry_type: Any = SinkLogEntry,
    ) -> None:
        self.location = str(checkpoint_location).rstrip("/") + "/" + dirname
        self._spark = spark
        self._entry = entry_type

    def _path(self, batch_id: int) -> str:
        return f"{self.location}/{int(batch_id)}"

    def get(self, batch_id: int) -> SinkLogEntry | None:
        """The recorded interval of ``batch_id``, or None if none was recorded."""
        try:
            lines = [r[0] for r in self._spark.read.text(self._path(batch_id)).collect()]
        except Exception as exc:  # noqa: BLE001
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                return None
            raise CdcError(f"cannot read sink log record {self._path(batch_id)}: {exc}") from exc
        if not lines:
            return None
        return self._entry.from_lines(lines, self._path(batch_id))

    def put(self, entry: SinkLogEntry) -> SinkLogEntry:
        """Record ``entry`` unless a record for its batch id exists; returns the record kept."""
        existing = self.get(entry.batch_id)
        if existing is not None:
            return existing
        failure: Exception | None = None
        try:
            (
                self._spark.createDataFrame([(entry.to_json(),)], "value string")
                .coalesce(1)
                .write.mode("error")
                .text(self._path(entry.batch_id))
            )  # "errorifexists": not on Connect
        except Exception as exc:  # noqa: BLE001 - recorded meanwhile: theirs wins (read below)
            failure = exc
        kept = self.get(entry.batch_id)
        if kept is None:
            cause = (
                spark_error_text(failure) if failure is not None else "written, yet not read back"
            )
            raise CdcError(
                f"cannot write sink log record {self._path(entry.batch_id)}: {cause}"
            ) from failure
        return kept


#: Where converters record their per-batch decisions, beside the sink's own log.
CONVERT_DIRNAME = "cdc-emitter-convert"


def converter_records(
    spark: Any, checkpoint_location: str, entry_type: Any, batch_id: int, what: str
) -> tuple[Any, Any, Any]:
    """``(log, record, previous)`` of a converter's batch: its log under
    ``<checkpoint>/cdc-emitter-convert``, the record of ``batch_id`` (a re-run takes what its first
    attempt decided) or None, and when that is None the record of the batch before (None for
    batch 0). `CdcError` naming ``what`` when a later batch has no record before it: the
    checkpoint was not started by the converter."""
    records = open_sink_log(
        spark, checkpoint_location, dirname=CONVERT_DIRNAME, entry_type=entry_type
    )
    record = records.get(batch_id)
    previous = None
    if record is None and batch_id > 0:
        previous = records.get(batch_id - 1)
        if previous is None:
            raise CdcError(
                f"{what} batch {batch_id}: {records.location} has no record of batch {batch_id - 1}; "
                "this checkpoint was not started by the converter: start from a new checkpoint"
            )
    return records, record, previous
