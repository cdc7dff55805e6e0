"""Decoding CDC messages in worker processes, results in submission order.

Decoding Avro is most of what reading a topic costs, and it is the one step that needs no shared
state: `DecodePool` hands chunks of raw message values to worker processes and gives back
what they decoded, chunk by chunk in the order the chunks went in, so the reader (which stays in
the calling process) sees exactly the message order a single process would.

Workers are plain ``python -m cdc_emitter.read.decode_worker`` processes talking over pipes, not
``multiprocessing``: nothing of the caller's ``__main__`` is re-imported and no process is forked
from one that runs librdkafka's threads. Frames on the pipes are an 8-byte length and a payload;
results are ``marshal``-ed (five times cheaper to load than decoding), or pickled when the data
holds values marshal does not know (decimals, dates and timestamps in nested data). Update
arrays whose values are all plain travel column by column, top-level dates and timestamps as
their longs and decimals as their unscaled integers, so they marshal; the pool makes them rows
again, in C.

Guarantees: results come back in submission order; a worker that dies or answers garbage does not
lose a chunk — the pool stops and the chunks not yet answered are decoded in the calling process
(`DecodePool.next_result` does it), so the caller sees the same results either way.
"""

from __future__ import annotations

import json
import marshal
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from cdc_emitter.protocol.updates import NAN, Progress, canonical_nan

if TYPE_CHECKING:
    from cdc_emitter.protocol.codec import CdcCodec

_LENGTH = struct.Struct("<Q")

#: Kinds of a decoded entry ``(kind, partition, offset, payload)``; COLUMNS only between a
#: worker and the pool, which makes them ROWS.
ROWS, PROGRESS, UNDECODABLE, COLUMNS = 0, 1, 2, 3
#: A decoded entry: ``(kind, partition, offset, payload)``, the payload as ``kind`` says.
Entry = tuple[int, int, int, Any]
#: Bytes still to read (estimated) that make starting decode workers worth their start-up.
PARALLEL_MIN_BYTES = 16 << 20
#: Bytes of message values per chunk a decode worker takes.
CHUNK_BYTES = 1 << 20


def decode_chunk(
    codec: CdcCodec,
    chunk: list[tuple[int, int, bytes | None]],
    *,
    rows: bool = True,
    by_column: bool = False,
) -> list[Entry]:
    """Entries ``(kind, partition, offset, payload)`` for each ``(partition, offset, value)``.

    ``payload``: plain ``(data, time, diff)`` rows (``rows=False``: ``Update`` objects, for a
    caller in this process; ``by_column``: columns where the codec reads them so, for a
    worker), ``(lower, upper, counts)``, or the text of the decode error with the value (for a
    caller that diagnoses it).
    """
    if by_column:
        decode: Any = codec.decode_columns
    else:
        decode = codec.decode_rows if rows else codec.decode
    from cdc_emitter.errors import DecodeError

    out: list[Entry] = []
    for partition, offset, value in chunk:
        try:
            decoded = decode(value)
        except DecodeError as exc:
            out.append((UNDECODABLE, partition, offset, (str(exc), value)))
            continue
        if isinstance(decoded, Progress):
            out.append((PROGRESS, partition, offset, tuple(decoded)))
        elif decoded.__class__ is tuple:
            out.append((COLUMNS, partition, offset, decoded))
        else:
            out.append((ROWS, partition, offset, decoded))
    return out


def dump_entries(entries: list[Entry]) -> bytes:
    try:
        return b"M" + marshal.dumps(entries)
    except ValueError:  # decimals, dates, timestamps
        return b"P" + pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)


def load_entries(payload: bytes) -> list[Entry]:
    kind, body = payload[:1], memoryview(payload)[1:]
    if kind == b"M":
        return marshal.loads(body)
    if kind == b"P":
        return pickle.loads(body)
    raise ValueError(f"unknown payload kind {kind!r}")


#: How a worker's NaN (always `NAN`, see `CdcCodec.decode`) looks in a marshal-ed and in a
#: pickled result: a result without these bytes holds no NaN to make `NAN` again here.
_NAN_BYTES = {b"M": struct.pack("<d", NAN), b"P": struct.pack(">d", NAN)}


def _may_hold_nan(payload: bytes) -> bool:
    pattern = _NAN_BYTES.get(payload[:1])
    return pattern is None or pattern in payload


def write_frame(stream: Any, payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def read_frame(stream: Any) -> bytes | None:
    """One frame's payload, or None at the end of the stream."""
    head = _read_exactly(stream, _LENGTH.size)
    if head is None:
        return None
    (size,) = _LENGTH.unpack(head)
    body = _read_exactly(stream, size)
    if body is None:
        raise EOFError(f"stream ended inside a frame of {size} bytes")
    return body


def _read_exactly(stream: Any, size: int) -> bytes | None:
    parts, left = [], size
    while left:
        part = stream.read(left)
        if not part:
            if left == size:
                return None
            raise EOFError(f"stream ended after {size - left} of {size} bytes")
        parts.append(part)
        left -= len(part)
    return b"".join(parts) if len(parts) != 1 else parts[0]


class _Worker:
    def __init__(self, spec: bytes):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdc_emitter.read.decode_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        if self.proc.stdin is None or self.proc.stdout is None:  # not reached: both are pipes
            raise RuntimeError("a decode worker started without its pipes")
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        # writes go through a thread: the caller never blocks on a full pipe while this worker
        # blocks writing a result the caller has not read yet
        self.outbox: queue.Queue[bytes | None] = queue.Queue()
        self.writer = threading.Thread(target=self._write, daemon=True)
        self.outbox.put(spec)
        self.writer.start()

    def _write(self) -> None:
        stdin = self.stdin
        try:
            while True:
                payload = self.outbox.get()
                if payload is None:
                    break
                write_frame(stdin, payload)
        except OSError:
            pass  # the worker is gone; its reader side notices
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def stop(self) -> None:
        self.outbox.put(None)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()


class DecodePool:
    """``workers`` decoding processes for ``codec``'s schema and framing (see the module doc)."""

    def __init__(self, codec: CdcCodec, workers: int, *, in_flight_per_worker: int = 2):
        if workers < 1:
            raise ValueError(f"a decode pool needs at least one worker, got {workers}")
        self._codec = codec
        options = {
            "data_schema": codec.data_schema,
            "framing": codec.framing,
            "schema_id": codec.schema_id,
        }
        if codec.writer_schemas is not None:
            # other ids' schemas come from the same registry, opened in each worker (its settings
            # travel through the worker's stdin, never its command line)
            registry = getattr(codec.writer_schemas, "__self__", None)
            if registry is None or not hasattr(registry, "spec"):
                raise ValueError(
                    "a decode pool needs the codec's writer schemas from a SchemaRegistry"
                )
            options["registry"] = registry.spec()
        spec = json.dumps(options).encode()
        self._workers = [_Worker(spec) for _ in range(workers)]
        self._next = 0
        self._order: deque[tuple[int, list]] = deque()  # (worker index, chunk) not yet answered
        self.max_in_flight = workers * in_flight_per_worker
        self.broken: str | None = None  # why the pool stopped, if it did

    @property
    def in_flight(self) -> int:
        return len(self._order)

    def submit(self, chunk: list[tuple[int, int, bytes | None]]) -> None:
        i = self._next
        self._next = (i + 1) % len(self._workers)
        self._order.append((i, chunk))
        if self.broken is None:
            self._workers[i].outbox.put(marshal.dumps(chunk))

    def ready(self) -> bool:
        """Whether the oldest chunk's result can be read without waiting for a worker."""
        if not self._order:
            return False
        if self.broken is not None:
            return True
        stdout = self._workers[self._order[0][0]].stdout
        return bool(select.select([stdout], [], [], 0)[0])

    def next_result(self) -> list[Entry]:
        """The entries of the oldest chunk (waits for its worker)."""
        i, chunk = self._order.popleft()
        if self.broken is None:
            try:
                payload = read_frame(self._workers[i].stdout)
                if payload is not None:
                    return self._as_rows(load_entries(payload), _may_hold_nan(payload))
                self.broken = f"decode worker {i} exited with code {self._workers[i].proc.poll()}"
            except (OSError, EOFError, ValueError) as exc:
                self.broken = f"decode worker {i} answered badly: {exc}"
        return decode_chunk(self._codec, chunk)

    def _as_rows(self, entries: list[Entry], nan: bool) -> list[Entry]:
        """A worker's entries as decoding here gives them: columns as rows, and every NaN the
        one `NAN` object again (``nan``: the result may hold one)."""
        codec = self._codec
        nan = nan and codec.has_floats
        out = []
        for entry in entries:
            kind, p, off, payload = entry
            if kind == COLUMNS:
                entry = (ROWS, p, off, codec.columns_to_rows(payload, nan))
            elif kind == ROWS and nan:
                entry = (ROWS, p, off, [(canonical_nan(d), t, x) for d, t, x in payload])
            out.append(entry)
        return out

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def feed_decoded(
    entries: list[Entry],
    headers: dict[tuple[int, int], list],
    push: Callable[[int, int, Any, Any], None],
    undecodable: Callable[[int, int, bytes | None, str], None],
) -> None:
    """Hand decoded ``entries`` on in order: update rows and progress statements to
    ``push(partition, offset, message, headers)`` (a statement with the headers ``headers``
    kept for its message, which are taken out), the rest to
    ``undecodable(partition, offset, value, error)``."""
    for kind, partition, offset, payload in entries:
        found = headers.pop((partition, offset), None) if headers else None
        if kind == ROWS:
            push(partition, offset, payload, None)
        elif kind == PROGRESS:
            push(partition, offset, Progress(*payload), found)
        else:
            undecodable(partition, offset, payload[1], payload[0])


def default_workers() -> int:
    """Decode processes worth starting here: one per core, none on a single core."""
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    return 0 if cores < 2 else min(cores, 8)
