"""The executor side of `CdcSink`: encode a partition's consolidated
updates as Avro arrays, produce them, and report what was written.

Everything here runs inside Spark tasks (``mapInArrow`` bodies) and needs only what the task's
closure carries (`TaskSpec`, no Spark objects) plus pyarrow, fastavro and confluent-kafka.

Guarantees: a task's messages are acknowledged by Kafka (``acks=all``, idempotent producer,
flushed) before it returns its counts, and a delivery error fails the task (Spark retries it; the
retry writes the same updates); no message is above the spec's ``max_message_bytes``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql import types as T

from cdc_emitter.errors import BadInputError, shorten
from cdc_emitter.protocol.schemas import Framing
from cdc_emitter.protocol.updates import Update

__all__ = ["TaskSpec", "produce_partition", "check_sizes"]


@dataclass
class TaskSpec:
    """Everything an executor task needs (pickled into the closure; holds no Spark objects)."""

    bootstrap_servers: str
    topic: str
    producer_config: dict
    avro_data: dict
    framing: Framing
    schema_id: int
    max_message_bytes: int
    headers: list
    data_types: list  # Spark DataTypes of the data columns
    flush_timeout: float | None
    #: the partitions update messages go to: all but partition 0 when there are several, so
    #: progress statements have partition 0 to themselves (None: the producer's choice)
    partitions: list | None = None
    #: makes the task's producer from the spec (None: a `CdcProducer`);
    #: the seam where tests put a producer that fails on cue
    producer_factory: Callable[[Any], Any] | None = None


def _producer(spec: TaskSpec) -> Any:
    """The task's producer: ``produce``, ``flush`` (raises on a failed delivery) and ``settle``."""
    if spec.producer_factory is not None:
        return spec.producer_factory(spec)
    from cdc_emitter.kafka.producer import CdcProducer

    return CdcProducer(spec.bootstrap_servers, spec.topic, spec.producer_config)


def _codec(spec: TaskSpec) -> Any:
    from cdc_emitter.protocol.codec import CdcCodec

    return CdcCodec(
        spec.avro_data,
        framing=spec.framing,
        schema_id=spec.schema_id,
        max_message_bytes=spec.max_message_bytes,
    )


def _map_fixer(dtype: Any) -> Callable[[Any], Any] | None:
    """A function turning Arrow's ``to_pylist`` value into fastavro's (maps: pairs → dict), or None."""
    if isinstance(dtype, T.MapType):
        value_fix = _map_fixer(dtype.valueType)
        if value_fix is None:
            return lambda v: None if v is None else dict(v)
        return lambda v: (
            None if v is None else {k: None if x is None else value_fix(x) for k, x in v}
        )
    if isinstance(dtype, T.ArrayType):
        element_fix = _map_fixer(dtype.elementType)
        if element_fix is None:
            return None
        return lambda v: None if v is None else [None if x is None else element_fix(x) for x in v]
    if isinstance(dtype, T.StructType):
        found = [(f.name, _map_fixer(f.dataType)) for f in dtype.fields]
        fixes = [(name, fn) for name, fn in found if fn is not None]
        if not fixes:
            return None

        def fix(v: Any) -> Any:
            if v is None:
                return None
            v = dict(v)
            for name, fn in fixes:
                v[name] = fn(v[name])
            return v

        return fix
    return None


def _flat(dtype: Any) -> bool:
    return isinstance(
        dtype,
        (
            T.LongType,
            T.IntegerType,
            T.ShortType,
            T.ByteType,
            T.BooleanType,
            T.DoubleType,
            T.FloatType,
            T.StringType,
            T.BinaryType,
        ),
    )


class _ArrayEncoder:
    """Update-array messages from Arrow batches, encoding a whole array per fastavro call.

    Calling fastavro once per array of updates instead of once per update roughly halves the
    Python cost of the pure-Python path. Messages are exactly the codec's: framing, union branch
    0, then fastavro's array encoding (count, items, 0). The number of updates per message adapts
    to the observed size; an array over the limit is split in halves (a single update over the
    limit cannot happen: validation checked every row before the first message).
    """

    def __init__(self, spec: TaskSpec) -> None:
        import fastavro

        from cdc_emitter.protocol.schemas import union_schema

        self._fastavro = fastavro
        self.schema = fastavro.parse_schema(union_schema(spec.avro_data)[0])
        self.head = _codec(spec).frame + b"\x00"  # the codec owns the Confluent header
        self.limit = spec.max_message_bytes
        self.names = [f["name"] for f in spec.avro_data["fields"]]
        self.fixers = [_map_fixer(t) for t in spec.data_types]
        self.per_message = 256  # updates per message, adapted to the observed sizes
        # flat primitive columns: encode whole Arrow batches with numpy (no per-row Python)
        self.nullable = [isinstance(f["type"], list) for f in spec.avro_data["fields"]]
        self.vector = all(_flat(t) for t in spec.data_types)

    def _encode_vector(self, batch: Any) -> Iterator[bytes]:
        import numpy as np

        from cdc_emitter.protocol import arrow_avro as _vector_avro
        from cdc_emitter.protocol.varint import encode_zigzag_long

        ncols = len(self.names)
        columns = [batch.column(i) for i in range(ncols + 2)]
        buf, ends = _vector_avro.encode_records(columns, self.nullable + [False, False])
        budget = self.limit - len(self.head) - 10 - 1  # head, count varint (bound), final 0
        n, i, base = len(ends), 0, 0
        while i < n:
            j = int(np.searchsorted(ends, base + budget, side="right"))
            if j <= i:
                raise BadInputError(
                    f"an update encodes to {int(ends[i]) - base} bytes, over the message limit of {self.limit}"
                )
            end = int(ends[j - 1])
            yield b"".join((self.head, encode_zigzag_long(j - i), buf[base:end].tobytes(), b"\x00"))
            i, base = j, end

    def _encode(self, records: list) -> list[bytes]:
        import io

        buf = io.BytesIO()
        buf.write(self.head)
        self._fastavro.schemaless_writer(buf, self.schema, records)
        message = buf.getvalue()
        if len(message) <= self.limit:
            if records:
                fit = max(1, int(len(records) * 0.9 * self.limit / len(message)))
                self.per_message = min(fit, 100_000)
            return [message]
        if len(records) == 1:
            raise BadInputError(
                f"an update encodes to {len(message)} bytes, over the message limit of {self.limit}"
            )
        half = len(records) // 2
        return self._encode(records[:half]) + self._encode(records[half:])

    def encode(self, batch: Any) -> Iterator[bytes]:
        if self.vector:
            yield from self._encode_vector(batch)
            return
        ncols = len(self.names)
        cols = []
        for i in range(ncols):
            values = batch.column(i).to_pylist()
            fix = self.fixers[i]
            cols.append(values if fix is None else [fix(v) for v in values])
        times = batch.column(ncols).to_pylist()
        diffs = batch.column(ncols + 1).to_pylist()
        names = self.names
        records = [
            {"data": dict(zip(names, row)), "time": t, "diff": d}
            for row, t, d in zip(zip(*cols), times, diffs)
        ]
        i, n = 0, len(records)
        while i < n:
            j = min(n, i + self.per_message)
            yield from self._encode(records[i:j])
            i = j


def produce_partition(spec: TaskSpec, batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow body: encode the partition's updates as arrays, produce, flush, return counts.

    Columns: the data columns, time, diff, and last the update's 64-bit hash, XOR-ed into the
    batch digest.
    """
    import pyarrow as pa

    arrays = _ArrayEncoder(spec)
    ncols = len(spec.data_types)
    import numpy as np

    counts: Counter = Counter()
    messages = n_bytes = 0
    digest = 0  # XOR of the updates' hashes (the last column): the batch's digest, any order
    ctx = TaskContext.get()
    task = ctx.partitionId() if ctx is not None else 0
    producer = _producer(spec)
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            times = batch.column(ncols).to_pylist()
            counts.update(times)
            digest ^= int(np.bitwise_xor.reduce(batch.column(batch.num_columns - 1).to_numpy()))
            for message in arrays.encode(batch):
                target = (
                    None
                    if not spec.partitions
                    else spec.partitions[(task + messages) % len(spec.partitions)]
                )
                producer.produce(message, headers=spec.headers, partition=target)
                messages += 1
                n_bytes += len(message)
        producer.flush(spec.flush_timeout)
    except BaseException:
        producer.settle(5)  # let what was queued land; the retry repeats it anyway
        raise
    # one row per time, plus a row (time -1) carrying the messages, their bytes and the digest
    yield pa.RecordBatch.from_pydict(
        {
            "time": pa.array(list(counts.keys()) + [-1], pa.int64()),
            "n": pa.array(list(counts.values()) + [0], pa.int64()),
            "messages": pa.array([0] * len(counts) + [messages], pa.int64()),
            "bytes": pa.array([0] * len(counts) + [n_bytes], pa.int64()),
            "digest": pa.array([0] * len(counts) + [digest], pa.int64()),
        }
    )


def check_sizes(spec: TaskSpec, batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow body for the few rows that might be too big: encode each alone, report the big ones."""
    import pyarrow as pa

    codec = _codec(spec)
    ncols = len(spec.data_types)
    sizes, examples, times = [], [], []
    for batch in batches:
        cols = [batch.column(i).to_pylist() for i in range(ncols)]
        for data, t, d, js in zip(
            zip(*cols),
            batch.column(ncols).to_pylist(),
            batch.column(ncols + 1).to_pylist(),
            batch.column(ncols + 2).to_pylist(),
        ):
            try:
                size = sum(len(m) for m in codec.encode_updates([Update(data, t, d)]))
            except BadInputError:
                size = -1  # does not fit in one message at all
            if size < 0 or size > spec.max_message_bytes:
                sizes.append(size)
                examples.append(shorten(js))
                times.append(t)
    yield pa.RecordBatch.from_pydict(
        {
            "size": pa.array(sizes, pa.int64()),
            "time": pa.array(times, pa.int64()),
            "example": pa.array(examples, pa.string()),
        }
    )
