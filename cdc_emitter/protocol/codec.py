"""The Avro codec for Materialize CDC (CDCv2) messages. Pure: fastavro, the standard library, and
numpy for long progress statements.

One Kafka message value is one datum of the documented top-level union
``[{"type": "array", "items": update}, progress]`` (branch 0: a batch of updates, branch 1: a
progress statement), optionally preceded by the Confluent header ``0x00`` + 4-byte big-endian
schema id ("confluent" framing, the default) or by nothing ("raw" framing).

Guarantees:
  * the bytes are exactly what fastavro writes for the documented union schema (the tests check
    this), but the codec writes union branch indexes itself and never resolves the union per
    message;
  * `CdcCodec.encode_updates` / `CdcCodec.pack_items` keep every update exactly once,
    in order, and never produce a message above ``max_message_bytes`` (framing included); an
    update that cannot fit alone raises `BadInputError` before any message is returned;
  * `CdcCodec.decode` returns hashable data (tuples in field order) and raises only
    `DecodeError` on bad input; every NaN in a float or double field is the one
    `NAN` object and -0.0 is 0.0, so equal values are equal data (as in
    Spark's grouping); `CdcCodec.diagnose` names the likely cause of a failure (framing,
    data schema) once, for a caller that sees many.
"""

from __future__ import annotations

import io
import json
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from typing import Any, cast

import fastavro

from cdc_emitter.errors import BadInputError, ConfigError, DecodeError, SchemaError
from cdc_emitter.protocol.converters import converter, record_converter, strip_logical
from cdc_emitter.protocol.fast_decode import (
    Columns,
    compile_array_decoder,
    compile_column_decoder,
    holds_floats,
)
from cdc_emitter.protocol.json_forms import avro_json, plain_json, sort_key_of
from cdc_emitter.protocol.schemas import (
    FRAMINGS,
    Framing,
    type_text,
    union_schema,
)

# in protocol.schemas; still imported from here by older code (explicit re-exports)
from cdc_emitter.protocol.schemas import NAMESPACE as NAMESPACE
from cdc_emitter.protocol.schemas import data_schema_from_text as data_schema_from_text
from cdc_emitter.protocol.schemas import kind as kind
from cdc_emitter.protocol.schemas import resolve as resolve
from cdc_emitter.protocol.schemas import schema_differences as schema_differences
from cdc_emitter.protocol.updates import Progress, Update
from cdc_emitter.protocol.varint import decode_zigzag_long as decode_zigzag_long
from cdc_emitter.protocol.varint import encode_zigzag_long as encode_zigzag_long

__all__ = ["CdcCodec", "decode_zigzag_long", "encode_zigzag_long"]


def _update_at(records: list[dict]) -> Callable[[int], str]:
    """How the ``j``-th of ``records`` is named in an error."""
    return lambda j: f"the update at time {records[j]['time']}"


class CdcCodec:
    """Encodes and decodes CDC messages for one data record schema and one framing.

    A message value is one datum of the documented union: an array of updates, or a progress
    statement. With confluent framing it starts with the Confluent header (magic byte 0, 4-byte
    big-endian schema id); with raw framing it starts with the datum.

    Args:
        data_schema: The data record (an Avro record schema as a dict).
        framing: ``"confluent"`` or ``"raw"``.
        schema_id: The schema id written into the Confluent header.
        max_message_bytes: No message made is larger, framing included.
        writer_schemas: With confluent framing, a function from a schema id to the data schema
            registered under it (a schema registry's). A message that names another id than
            ``schema_id`` is then decoded with its writer's schema and resolved into this
            codec's by Avro's rules (fields added with defaults, removed, promoted), so a topic
            whose schema evolved reads as one. Without it, every message is read with this
            codec's schema.

    Raises:
        ConfigError: ``framing``, ``schema_id`` or ``max_message_bytes`` cannot be used.
        SchemaError: ``data_schema`` is not a valid Avro record.
    """

    def __init__(
        self,
        data_schema: dict,
        *,
        framing: Framing = "confluent",
        schema_id: int = 0,
        max_message_bytes: int = 900_000,
        writer_schemas: Callable[[int], dict] | None = None,
    ):
        if framing not in FRAMINGS:
            raise ConfigError(f"framing must be one of {', '.join(FRAMINGS)}, got {framing!r}")
        if (
            isinstance(schema_id, bool)
            or not isinstance(schema_id, int)
            or not 0 <= schema_id < 2**31
        ):
            raise ConfigError(f"schema id must be an integer in 0..2^31-1, got {schema_id!r}")
        if (
            isinstance(max_message_bytes, bool)
            or not isinstance(max_message_bytes, int)
            or max_message_bytes < 16
        ):
            raise ConfigError(
                f"max_message_bytes must be an integer >= 16, got {max_message_bytes!r}"
            )
        self.union = union_schema(data_schema)
        self.data_schema = self.union[0]["items"]["fields"][0]["type"]
        self.field_names = [f["name"] for f in self.data_schema["fields"]]
        self.framing = framing
        self.schema_id = schema_id
        self.max_message_bytes = max_message_bytes
        #: what every message starts with: the Confluent header (magic 0, 4-byte schema id) or nothing
        self.frame = b"\x00" + struct.pack(">I", schema_id) if framing == "confluent" else b""
        self._skip = len(self.frame)
        self.writer_schemas = writer_schemas if framing == "confluent" else None
        self._writers: dict[int, tuple] = {}  # schema id -> (array, progress) writer schemas

        named: dict = {}
        # parse_schema gives back the shape it is given: here a list of dicts
        parsed = cast(
            "list[dict[str, Any]]", fastavro.parse_schema(self.union, named_schemas=named)
        )
        self._item = fastavro.parse_schema(self.union[0]["items"])
        self._array = fastavro.parse_schema(self.union[0])
        self._progress = fastavro.parse_schema(self.union[1])
        self._data_alone = fastavro.parse_schema(self.data_schema)
        data_parsed = parsed[0]["items"]["fields"][0]["type"]
        self._to_hashable = record_converter(data_parsed, named, "hash")
        self._to_writer = record_converter(data_parsed, named, "write")
        self._flat = all(converter(f["type"], named, "hash") is None for f in data_parsed["fields"])
        raw_named: dict = {}
        self._raw_parsed = cast(
            "list[dict[str, Any]]",
            fastavro.parse_schema(strip_logical(self.union), named_schemas=raw_named),
        )
        self._raw_named = raw_named
        self._raw_array = fastavro.parse_schema(strip_logical(self.union[0]))
        self._raw_progress = fastavro.parse_schema(strip_logical(self.union[1]))
        self._json_fns: dict = {}
        # Non-null, non-float primitive columns: the data tuples themselves are a total order.
        comparable = ("boolean", "int", "long", "string", "bytes")
        self._plain = all(
            isinstance(f["type"], str) and f["type"] in comparable for f in data_parsed["fields"]
        )
        self._compile_decoders()
        #: Whether data can hold floats (NaN must then be made the one NAN object again after
        #: data crossed a process boundary).
        self.has_floats = holds_floats(self.data_schema)

    def _compile_decoders(self) -> None:
        """The decoders generated for this layout (protocol/fast_decode), or None."""
        self._fast = compile_array_decoder(self.union[0]["items"])
        self._columns = compile_column_decoder(self.union[0]["items"])

    def __getstate__(self) -> dict[str, Any]:
        # generated code does not pickle: the decoders are made again where the codec lands
        # (a Spark Python data source's reader, a worker)
        state = dict(self.__dict__)
        del state["_fast"], state["_columns"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compile_decoders()

    # -- encoding -------------------------------------------------------------------------

    def encode_updates(self, updates: Iterable[Update]) -> list[bytes]:
        """Encode updates as update-array messages, each within ``max_message_bytes``.

        Messages are filled to about 90% of the limit. Chunks sized from the bytes per update
        seen so far are written as whole arrays in one fastavro call. A chunk that comes out too
        large is encoded again item by item and packed greedily (see `pack_items`).

        Args:
            updates: ``(data, time, diff)`` updates. ``data`` is a dict by field name or a
                tuple/list in field order (nested records alike).

        Returns:
            The messages, framed. They hold every update exactly once, in order.

        Raises:
            BadInputError: An update cannot be encoded, or does not fit in a message alone.
        """
        conv = self._to_writer
        try:
            records = [
                {"data": conv(data), "time": time, "diff": diff} for data, time, diff in updates
            ]
        except Exception:  # name the culprit
            for data, time, _diff in updates:
                try:
                    conv(data)
                except Exception as exc:
                    raise BadInputError(
                        f"update {data!r} at time {time} cannot be encoded: {exc}"
                    ) from None
            raise
        head = self.frame + b"\x00"  # framing + union branch 0
        limit, write, array = self.max_message_bytes, fastavro.schemaless_writer, self._array
        room = (limit - len(head) - 11) * 0.9
        out: list[bytes] = []
        i, n = 0, len(records)
        probe = self._encode_items(records[:32])[1] if n else [1]  # bytes per update, first guess
        chunk = max(1, int(room / max(sum(probe) / len(probe), 1.0)))
        while i < n:
            part = records[i : i + chunk]
            buf = io.BytesIO()
            buf.write(head)
            try:
                write(buf, array, part)
                fits = buf.tell() <= limit
            except Exception:
                fits = False  # the item-by-item path names the bad update
            if fits:
                out.append(buf.getvalue())
                avg = (buf.tell() - len(head)) / len(part)
            else:  # greedy packing; the last, partly filled message goes back to the queue
                body, sizes = self._encode_items(part)
                self._check_sizes(sizes, _update_at(part))
                bounds = list(self._bounds(sizes))
                if len(bounds) > 1 and i + len(part) < n:
                    bounds.pop()
                out.extend(self._message(head, body, bound) for bound in bounds)
                part = part[: bounds[-1][1]]
                avg = sum(sizes[: len(part)]) / len(part)
            i += len(part)
            chunk = max(1, int(room / max(avg, 1.0)))
        return out

    def _encode_items(self, records: list[dict]) -> tuple[memoryview, list[int]]:
        """Each update record's bytes, contiguous in one buffer, and their sizes."""
        buf = io.BytesIO()
        write, item, tell = fastavro.schemaless_writer, self._item, buf.tell
        ends = []
        for rec in records:
            try:
                write(buf, item, rec)
            except Exception as exc:
                raise BadInputError(
                    f"update {rec['data']!r} at time {rec['time']} cannot be encoded: {exc}"
                ) from None
            ends.append(tell())
        return buf.getbuffer(), [b - a for a, b in zip([0, *ends], ends)]

    def pack_items(self, items: Iterable[bytes]) -> Iterator[bytes]:
        """Pack already-encoded ``update`` records into framed update-array messages.

        Greedy: each message takes as many items as fit. Every item is checked before the first
        message is made.

        Args:
            items: Each update record's Avro bytes.

        Returns:
            The messages, in item order.

        Raises:
            BadInputError: An item does not fit in a message alone.
        """
        items = list(items)
        sizes = [len(b) for b in items]
        self._check_sizes(sizes, lambda i: f"item {i}")
        body, head = b"".join(items), self.frame + b"\x00"
        return (self._message(head, body, bound) for bound in self._bounds(sizes))

    def merge_arrays(self, messages: Iterable[bytes]) -> list[bytes]:
        """Join update-array messages of this codec into as few as fit.

        Greedy, order kept, each block whole. The updates, and so a batch's counts and digest,
        stay the same.

        Args:
            messages: Update-array messages of one block each, as `pack_items` and the JVM data
                path make them.

        Returns:
            The merged messages, each at most ``max_message_bytes`` unless one given was
            already over it.

        Raises:
            DecodeError: A message is not one framed update-array block.
        """
        head = self.frame + b"\x00"
        blocks: list[tuple[int, memoryview]] = []
        for i, message in enumerate(messages):
            view = memoryview(message)
            if bytes(view[: len(head)]) != head or len(view) < len(head) + 2 or view[-1] != 0:
                raise DecodeError(
                    f"update-array message {i} ({len(view)} bytes) is not framed "
                    f"as this codec's update arrays"
                )
            try:  # the block count, before the closing zero
                count, pos = decode_zigzag_long(view, len(head), len(view) - 1)
            except DecodeError:
                raise DecodeError(f"update-array message {i} ends inside its block count") from None
            if count <= 0:
                raise DecodeError(f"update-array message {i} has a block of {count} updates")
            blocks.append((count, view[pos:-1]))
        merged: list[bytes] = []
        i = 0
        while i < len(blocks):
            count, size, j = blocks[i][0], len(blocks[i][1]), i + 1
            while j < len(blocks):
                grown = size + len(blocks[j][1])
                if (
                    len(head) + len(encode_zigzag_long(count + blocks[j][0])) + grown + 1
                    > self.max_message_bytes
                ):
                    break
                count, size, j = count + blocks[j][0], grown, j + 1
            merged.append(
                b"".join(
                    (head, encode_zigzag_long(count), *(body for _, body in blocks[i:j]), b"\x00")
                )
            )
            i = j
        return merged

    def _check_sizes(self, sizes: list[int], what: Callable[[int], str]) -> None:
        fixed = len(self.frame) + 3  # union index, count 1, closing zero
        limit = self.max_message_bytes
        for i, size in enumerate(sizes):
            if size + fixed > limit:
                raise BadInputError(
                    f"{what(i)} encodes to {size} bytes, more than fits in a message of at most "
                    f"{limit} bytes ({fixed} of them go to framing and array headers); "
                    "raise max_message_bytes"
                )

    def _bounds(self, sizes: list[int]) -> Iterator[tuple[int, int, int, int]]:
        """Greedy messages as item range ``i..j`` and byte range (sizes already checked)."""
        budget = self.max_message_bytes - len(self.frame) - 2 - len(encode_zigzag_long(len(sizes)))
        cum = [0, *accumulate(sizes)]
        n, i = len(sizes), 0
        while i < n:
            j = bisect_right(cum, cum[i] + budget, i + 1) - 1
            j = max(j, i + 1)  # fits alone (checked), just not with the worst-case count bound
            yield i, j, cum[i], cum[j]
            i = j

    @staticmethod
    def _message(head: bytes, body: Any, bound: tuple[int, int, int, int]) -> bytes:
        """Items ``i..j`` as one Avro array block: count, the items' bytes, closing zero."""
        i, j, start, end = bound
        return b"".join((head, encode_zigzag_long(j - i), body[start:end], b"\x00"))

    def encode_progress(self, progress: Progress) -> bytes:
        """Encode a progress statement as a message.

        Args:
            progress: The statement.

        Returns:
            The framing, union branch 1 and the progress record.

        Raises:
            BadInputError: A bound, time or count is not a long.
        """
        lower, upper, counts = progress
        # by hand, vectorised (numpy): a statement of a batch of event times can count a million
        # times, which fastavro took over a second to write as records; the same bytes
        from cdc_emitter.protocol.arrow_avro import long_block

        lower_block, upper_block = long_block(lower), long_block(upper)
        counts_block = long_block(counts)
        if lower_block is not None and upper_block is not None and counts_block is not None:
            return b"".join((self.frame, b"\x02", lower_block, upper_block, counts_block))
        record = {  # a value that is not a plain long: fastavro says what is wrong
            "lower": list(lower),
            "upper": list(upper),
            "counts": [{"time": t, "count": c} for t, c in counts],
        }
        buf = io.BytesIO()
        buf.write(self.frame + b"\x02")
        try:
            fastavro.schemaless_writer(buf, self._progress, record)
        except Exception as exc:
            raise BadInputError(f"progress {progress!r} cannot be encoded: {exc}") from None
        return buf.getvalue()

    # -- decoding -------------------------------------------------------------------------

    def _body(self, value: bytes | None, array_schema, progress_schema):
        if value is None:
            raise DecodeError("the message has no value (a tombstone)")
        skip = self._skip
        if skip:
            if len(value) < 6:
                raise DecodeError(
                    f"message of {len(value)} bytes is too short for confluent framing"
                )
            if value[0] != 0:
                raise DecodeError(f"bad magic byte {value[0]} (expected 0 for confluent framing)")
        elif not value:
            raise DecodeError("empty message")
        branch = value[skip]
        if branch == 0:
            schema = array_schema
        elif branch == 2:
            schema = progress_schema
        else:
            raise DecodeError(f"bad union index byte {branch} (expected 0 or 2)")
        buf = io.BytesIO(value)
        buf.seek(skip + 1)
        what = "update array" if branch == 0 else "progress record"
        writer = None
        if self.writer_schemas is not None:
            schema_id = int.from_bytes(value[1:5], "big")
            if schema_id != self.schema_id:
                writer = self._writer(self.writer_schemas, schema_id)[0 if branch == 0 else 1]
                what += f" (written with schema id {schema_id})"
        try:
            if writer is None:
                datum = fastavro.schemaless_reader(buf, schema, None)
            else:
                datum = fastavro.schemaless_reader(buf, writer, schema)
        except Exception as exc:
            reason = str(exc) or (
                "ran past the end of the message" if isinstance(exc, EOFError) else ""
            )
            raise DecodeError(
                f"the {what} does not decode with the schema ({type(exc).__name__}"
                f"{': ' + reason if reason else ''}; at byte {buf.tell()} of {len(value)})"
            ) from None
        if buf.tell() != len(value):
            raise DecodeError(
                f"the {what} decodes with the schema but leaves {len(value) - buf.tell()} of "
                f"{len(value)} bytes unread"
            )
        return branch, datum

    def _writer(self, writer_schemas: Callable[[int], dict], schema_id: int) -> tuple:
        """The writer's array and progress schemas for ``schema_id``, parsed once."""
        found = self._writers.get(schema_id)
        if found is None:
            try:
                union = union_schema(writer_schemas(schema_id))
            except SchemaError as exc:  # an unknown id, a schema that is no CDC union: this message
                raise DecodeError(f"schema id {schema_id}: {exc}") from None
            found = self._writers[schema_id] = (
                fastavro.parse_schema(union[0]),
                fastavro.parse_schema(union[1]),
            )
        return found

    def decode(self, value: bytes | None) -> list[Update] | Progress:
        """Decode one message.

        Every NaN in a float or double field is the one `NAN` object, and -0.0 is 0.0, so
        equal values are equal data.

        Args:
            value: The message value; None for a tombstone.

        Returns:
            The updates, data as tuples in field order, or the progress statement.

        Raises:
            DecodeError: The value does not decode with this schema and framing.
        """
        return self._decode(value, Update)

    def decode_rows(self, value: bytes | None) -> list[tuple] | Progress:
        """Decode one message as `decode` does, updates as plain tuples.

        Plain ``(data, time, diff)`` tuples marshal and pickle as such, for decoding in another
        process.

        Args:
            value: The message value; None for a tombstone.

        Returns:
            The ``(data, time, diff)`` tuples, or the progress statement.

        Raises:
            DecodeError: The value does not decode with this schema and framing.
        """
        return self._decode(value, tuple)

    def _array_start(self, value: bytes | None) -> int | None:
        """Where the update array of ``value`` starts, if it is one framed as this codec's and
        written with this codec's schema (what the generated decoders read); else None."""
        skip = self._skip
        if (
            value
            and len(value) > skip
            and value[skip] == 0  # an update array
            and (not skip or value[0] == 0)
            and (self.writer_schemas is None or value[1:5] == self.frame[1:5])
        ):
            return skip + 1
        return None

    def decode_columns(self, value: bytes | None) -> Columns | list[tuple] | Progress:
        """Decode one message as `decode_rows` does, an update array column by column where
        its layout allows (see `cdc_emitter.protocol.fast_decode.ColumnDecoder`).

        For a decoding process: `columns_to_rows` makes the rows again on the other side.

        Args:
            value: The message value; None for a tombstone.

        Returns:
            ``(times, diffs, columns)`` (a plain tuple), or what `decode_rows` returns.

        Raises:
            DecodeError: The value does not decode with this schema and framing.
        """
        columns, start = self._columns, self._array_start(value)
        if columns is not None and start is not None:
            try:
                return columns.decode(cast(bytes, value), start)
            except Exception:  # Unfit, or anything a logical reader raised on odd bytes
                pass  # decoded as rows: the same values, or the error fastavro gives
        return self.decode_rows(value)

    def columns_to_rows(self, decoded: Columns, nan: bool = False) -> list[tuple]:
        """The rows of what `decode_columns` gave as columns.

        Args:
            decoded: ``(times, diffs, columns)``.
            nan: Whether a float column may hold NaNs that are not `NAN` (after ``marshal``).

        Returns:
            The ``(data, time, diff)`` tuples `decode_rows` gives for the same message.
        """
        if self._columns is None:
            raise ValueError("this codec decodes no message column by column")
        return self._columns.rows(decoded, nan)

    def _decode(self, value: bytes | None, row: type) -> list | Progress:
        fast, start = self._fast, self._array_start(value)
        if fast is not None and start is not None:
            try:
                return fast(cast(bytes, value), start, row)
            except Exception:  # Unfit, or anything a logical reader raised on odd bytes
                pass  # fastavro decides: the same value, or the error it always gave
        branch, datum = self._body(value, self._array, self._progress)
        if branch == 2:
            try:
                return Progress(
                    tuple(datum["lower"]),
                    tuple(datum["upper"]),
                    tuple((c["time"], c["count"]) for c in datum["counts"]),
                )
            except (KeyError, TypeError) as exc:
                raise DecodeError(f"malformed progress record: {exc}") from None
        new = tuple.__new__  # Update(...) without the NamedTuple __new__ call overhead
        if self._flat:
            return [new(row, (tuple(r["data"].values()), r["time"], r["diff"])) for r in datum]
        conv = self._to_hashable
        return [new(row, (conv(r["data"]), r["time"], r["diff"])) for r in datum]

    def decode_data(self, body: bytes) -> Any:
        """Decode one data record's Avro body (no framing, no union index).

        Args:
            body: The record's bytes.

        Returns:
            The data as `decode` gives it: a tuple in field order, values as the reader
            compares them.
        """
        # the data schema is a record: fastavro reads it as a dict
        datum = cast(
            "dict[str, Any]", fastavro.schemaless_reader(io.BytesIO(body), self._data_alone, None)
        )
        return tuple(datum.values()) if self._flat else self._to_hashable(datum)

    def diagnose(self, value: bytes | None) -> str | None:
        """Name the likely cause when a message does not decode: the framing or the data schema.

        Args:
            value: The message value.

        Returns:
            The cause and what to change, or None when the value decodes or nothing better
            than the decode error itself can be said.
        """
        if value is None:
            return None
        try:
            self._body(value, self._array, self._progress)
            return None
        except DecodeError:
            pass
        other: Framing = "raw" if self.framing == "confluent" else "confluent"
        try:
            CdcCodec(self.data_schema, framing=other)._body(value, self._array, self._progress)
        except (DecodeError, IndexError):
            pass
        else:
            found = "no Confluent header" if other == "raw" else "a Confluent header"
            return (
                f"the messages carry {found}: read them with framing {other!r} (--framing {other})"
            )
        header = ""
        if self.framing == "confluent" and len(value) >= 6 and value[0] == 0 and value[5] in (0, 2):
            header = f"; the messages name schema id {int.from_bytes(value[1:5], 'big')}"
        if len(value) > self._skip and value[self._skip] == 0:
            fields = ", ".join(
                f"{f['name']} {type_text(f['type'])}" for f in self.data_schema["fields"]
            )
            return (
                f"update arrays do not decode with the data schema ({fields}): the topic was "
                f"probably written with another data schema{header}; read it with the schema "
                "its writer used"
            )
        return None

    # -- presentation ---------------------------------------------------------------------

    def data_to_json(self, data: Any) -> dict:
        """Turn data into a plain JSON-able dict by field name.

        Args:
            data: A decoded tuple, or a dict.

        Returns:
            The fields by name: unions unwrapped, bytes as base64, decimals and dates as text,
            NaN and infinities by name.
        """
        return plain_json(self._raw_parsed[0]["items"]["fields"][0]["type"], data, self._raw_named)

    def sort_key(self, data: Any) -> Any:
        """A total-order key for decoded data (None, mixed types, nested tuples).

        Args:
            data: Decoded data.

        Returns:
            A key that sorts nulls first, NaN after every number, strings by code point.
        """
        return data if self._plain else sort_key_of(data)

    def to_avro_json(self, value: bytes) -> str:
        """Render a message as one compact line of Avro-JSON, as the reference documentation does.

        Args:
            value: The message value.

        Returns:
            The line, without a newline.

        Raises:
            DecodeError: The value does not decode with this schema and framing.
        """
        branch, datum = self._body(value, self._raw_array, self._raw_progress)
        schema = self._raw_parsed[0 if branch == 0 else 1]
        name = "array" if branch == 0 else schema["name"]
        out = {name: avro_json(schema, datum, self._raw_named)}
        return json.dumps(out, separators=(",", ":"), ensure_ascii=False)
