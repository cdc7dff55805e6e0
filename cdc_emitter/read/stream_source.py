"""``spark.readStream.format("cdcv2")``: a CDCv2 topic as a stream of proven times.

Each micro-batch holds the consolidated updates ``(data columns…, time, diff)`` of the times
the topic proved complete since the previous one: never an update of an open time, never a
duplicate, never a time twice. The batch's offset is the frontier, so a query restarted from
its checkpoint goes on exactly where it stopped.

The reader runs in Spark's driver-side Python process for the query (PySpark's
``SimpleDataSourceStreamReader``, Spark 4.0 or newer): it follows the topic with
`cdc_emitter.read.follow.TopicFollower` and holds only the updates of open times. Nothing of
ours runs on executors.

Options (``kafka.*`` as for Spark's Kafka source, passed to librdkafka without the prefix):

=============================  ==========================================================
``kafka.bootstrap.servers``    the Kafka servers (required)
``topic``                      the topic (required)
``schema``                     the Avro ``data`` record as JSON; default: the writer's, from
                               the header of the topic's newest progress statement
``maxReadSeconds``             the most time one micro-batch spends reading (default 1)
``brokerTimeout``              seconds a broker may be unreachable (default 30)
=============================  ==========================================================
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

try:
    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
except ImportError:  # PySpark 3.5 has no Python data sources: `register` says so
    DataSource = SimpleDataSourceStreamReader = object  # type: ignore[misc,assignment]

from cdc_emitter.errors import BrokerError, ConfigError
from cdc_emitter.kafka.config import BROKER_TIMEOUT
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.read.cdc_stream import stream_columns, topic_data_schema
from cdc_emitter.read.follow import TopicFollower, replay
from cdc_emitter.spark.avro_types import row_converter

__all__ = ["FORMAT", "CdcV2DataSource", "CdcV2StreamReader"]

#: The name the source is registered under.
FORMAT = "cdcv2"
#: Spark types whose Python values (as `row_converter` gives them) Arrow takes as they are.
#: A stream of only these columns reaches Spark as Arrow record batches made column by
#: column; any other goes as tuples, which PySpark converts value by value (on 2M narrow
#: updates that was 3.0 s of the source's 14 s).
ARROW_AS_IS = (
    T.LongType,
    T.IntegerType,
    T.ShortType,
    T.ByteType,
    T.DoubleType,
    T.FloatType,
    T.StringType,
    T.BinaryType,
    T.BooleanType,
)
#: Rows per Arrow record batch handed to Spark.
BATCH_ROWS = 65_536


class CdcV2DataSource(DataSource):
    """The ``cdcv2`` data source (streaming reads only). See the module docstring."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> T.StructType:
        # kept: Spark sends this object to the reader's process (and, for a replay after a
        # restart, to an executor's Python): every reader then decodes with this schema
        self._data_schema = _settings(self.options).data_schema()
        return stream_columns(self._data_schema)

    def simpleStreamReader(self, schema: T.StructType) -> CdcV2StreamReader:
        settings = _settings(self.options)
        return CdcV2StreamReader(settings, getattr(self, "_data_schema", None))


class _Settings:
    """The source's options, checked."""

    def __init__(self, options: Mapping[str, str]) -> None:
        given = {k.lower(): (k, v) for k, v in options.items()}
        servers = given.get("kafka.bootstrap.servers", ("", ""))[1].strip()
        topic = given.get("topic", ("", ""))[1].strip()
        missing = [n for n, v in (("kafka.bootstrap.servers", servers), ("topic", topic)) if not v]
        if missing:
            raise ConfigError(
                f'the {FORMAT} source needs the option {missing[0]!r}: .option("{missing[0]}", ...)'
            )
        self.servers, self.topic = servers, topic
        self.config = {
            key[len("kafka.") :]: value
            for low, (key, value) in given.items()
            if low.startswith("kafka.") and low != "kafka.bootstrap.servers"
        }
        self.schema_text = given.get("schema", (None, None))[1]
        self.max_read = _number(given, "maxreadseconds", 1.0)
        self.broker_timeout = _number(given, "brokertimeout", BROKER_TIMEOUT)

    def data_schema(self) -> dict:
        return topic_data_schema(
            self.servers,
            self.topic,
            self.config,
            schema=self.schema_text,
            timeout=self.broker_timeout,
            option="option 'schema'",
        )


#: The documented spelling of each option (Spark hands the options over in lower case).
_OPTION_NAMES = {"maxreadseconds": "maxReadSeconds", "brokertimeout": "brokerTimeout"}


def _number(given: dict, key: str, default: float) -> float:
    if key not in given:
        return default
    _, text = given[key]
    name = _OPTION_NAMES.get(key, key)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigError(f"option {name!r} must be a positive number of seconds, not {text!r}")
    return value


def _settings(options: Mapping[str, str]) -> _Settings:
    return _Settings(options)


class CdcV2StreamReader(SimpleDataSourceStreamReader):
    """Reads complete times on the driver. Offsets are ``{"frontier": t, "closed": bool}``."""

    def __init__(self, settings: _Settings, data_schema: dict | None = None) -> None:
        self.settings = settings
        data = data_schema if data_schema is not None else settings.data_schema()
        self.codec = CdcCodec(data)
        self.row = row_converter(data)
        self.arrow = _arrow_schema(stream_columns(data))
        self._follower: TopicFollower | None = None
        self._position: dict | None = None

    def initialOffset(self) -> dict:
        return {"frontier": 0, "closed": False}

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        if start.get("closed"):
            return iter(()), start
        follower = self._follower
        if follower is None or self._position != start:  # a new query, or one restarted
            if follower is not None:
                follower.close()
            s = self.settings
            follower = self._follower = TopicFollower(
                s.servers,
                s.topic,
                self.codec,
                s.config,
                broker_timeout=s.broker_timeout,
                start=int(start["frontier"]),
            )
        try:
            updates = follower.advance(self.settings.max_read)
            if self._position != start:  # just (re)built: catch up to `start` first, or Spark
                updates += self._catch_up(follower, int(start["frontier"]))  # sees no new data
        except BaseException:
            follower.close()
            self._follower = None
            raise
        frontier = follower.frontier
        if not frontier:
            end = {"frontier": start["frontier"], "closed": True}
        else:
            end = {"frontier": max(int(start["frontier"]), frontier[0]), "closed": False}
        self._position = end
        return iter(self._rows(updates)), end

    def _catch_up(self, follower: TopicFollower, start: int) -> list[Any]:
        """Read until the frontier reaches ``start`` (a restarted query's).

        Raises:
            BrokerError: Nothing more came for the broker timeout and the frontier is still
                below ``start`` (messages deleted by retention?).
        """
        out: list[Any] = []
        patience = self.settings.broker_timeout
        deadline, read = time.monotonic() + patience, follower.reader.messages
        while follower.frontier and follower.frontier[0] < start:
            out += follower.advance(self.settings.max_read)
            if follower.reader.messages > read:
                deadline, read = time.monotonic() + patience, follower.reader.messages
            elif time.monotonic() > deadline:
                raise BrokerError(
                    f"topic {self.settings.topic!r} on {self.settings.servers} no longer proves "
                    f"the times below {start}, where the query stopped (its frontier is "
                    f"{list(follower.frontier)}, and nothing more came in {patience:g}s): were "
                    "messages deleted by retention?"
                )
        return out

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        s = self.settings
        until = _UNBOUNDED if end.get("closed") else int(end["frontier"])
        updates = replay(
            s.servers,
            s.topic,
            self.codec,
            int(start["frontier"]),
            until,
            s.config,
            broker_timeout=s.broker_timeout,
        )
        return iter(self._rows(updates))

    def commit(self, end: dict) -> None:
        """Nothing to do: the topic is read without a consumer group."""

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None

    def _rows(self, updates: list[Any]) -> list[tuple] | list[pa.RecordBatch]:
        """The updates in time order: as Arrow record batches where `arrow` is set, else as
        tuples."""
        ordered = sorted(updates, key=lambda u: u.time)
        if self.arrow is None:
            row = self.row
            return [(*row(u.data), u.time, u.diff) for u in ordered]
        return [
            _record_batch(ordered[i : i + BATCH_ROWS], self.arrow)
            for i in range(0, len(ordered), BATCH_ROWS)
        ]


def _arrow_schema(columns: T.StructType) -> pa.Schema | None:
    """The Arrow schema of ``columns`` when every column is of an `ARROW_AS_IS` type and this
    PySpark takes record batches from a streaming source; else None."""
    if not all(isinstance(f.dataType, ARROW_AS_IS) for f in columns.fields):
        return None
    try:  # the process that runs a streaming source's reader sends its batches through this
        from pyspark.sql.streaming import python_streaming_source_runner as runner
    except ImportError:
        return None
    if not hasattr(runner, "records_to_arrow_batches"):  # which takes record batches as they are
        return None
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(columns)


def _record_batch(updates: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    """``updates`` as one record batch of ``schema``: the data's values, ``time``, ``diff``."""
    data = list(zip(*[u.data for u in updates])) if len(schema) > 2 else []
    columns = [*data, [u.time for u in updates], [u.diff for u in updates]]
    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=field.type) for values, field in zip(columns, schema)],
        schema=schema,
    )


#: A frontier past every time: a closed history's updates are all below it.
_UNBOUNDED = 2**63 - 1


def register(spark: Any) -> None:
    """Register the ``cdcv2`` source with ``spark`` (PySpark 4.0 or newer).

    Args:
        spark: The session to add the ``cdcv2`` format to; once per session is enough.

    Raises:
        ConfigError: This PySpark has no Python data sources (3.5 and older).
    """
    registration = getattr(spark, "dataSource", None)
    if registration is None:
        import pyspark

        raise ConfigError(
            f"the {FORMAT} streaming source needs PySpark 4.0 or newer (Python data sources); "
            f"this is PySpark {pyspark.__version__}: cdc_emitter.read_cdc_stream hands over "
            "the same batches in a loop of yours"
        )
    registration.register(CdcV2DataSource)
