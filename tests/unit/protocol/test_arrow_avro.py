"""The vectorised flat-record encoder writes exactly fastavro's bytes."""

from __future__ import annotations

import io
import random

import fastavro
import pyarrow as pa

from cdc_emitter.protocol.arrow_avro import SMALL_BLOCK, encode_records, long_block, supported

FIELDS = [
    ("l", pa.int64(), "long", True),
    ("i", pa.int32(), "int", False),
    ("s", pa.string(), "string", True),
    ("b", pa.binary(), "bytes", False),
    ("d", pa.float64(), "double", True),
    ("f", pa.float32(), "float", False),
    ("o", pa.bool_(), "boolean", True),
    ("sh", pa.int16(), "int", True),
]


def value(rng, avro, nullable):
    if nullable and rng.random() < 0.2:
        return None
    if avro == "long":
        return rng.choice(
            [0, -1, 1, 63, 64, -64, -65, 2**63 - 1, -(2**63), rng.randint(-(2**40), 2**40)]
        )
    if avro == "int":
        return rng.choice([0, -1, 127, -128, rng.randint(-(2**15), 2**15 - 1)])
    if avro == "string":
        return rng.choice(["", "a", "ünïcode ✓", "x" * 200])
    if avro == "bytes":
        return rng.choice([b"", b"\x00\xff", bytes(range(256))])
    if avro in ("double", "float"):
        return rng.choice([0.0, -1.5, 3.25, 1e10])
    return rng.choice([True, False])


def test_matches_fastavro():
    rng = random.Random(7)
    n = 500
    rows = [[value(rng, avro, nb) for _, _, avro, nb in FIELDS] for _ in range(n)]
    times = [rng.choice([0, 5, 2**40]) for _ in range(n)]
    diffs = [rng.choice([1, -1, 2**62, -(2**63)]) for _ in range(n)]
    columns = [pa.array([r[j] for r in rows], t) for j, (_, t, _, _) in enumerate(FIELDS)]
    columns[0] = columns[0].slice(0)  # plain
    assert all(supported(c.type) for c in columns)
    buf, ends = encode_records(
        columns + [pa.array(times, pa.int64()), pa.array(diffs, pa.int64())],
        [nb for *_, nb in FIELDS] + [False, False],
    )
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "update",
            "fields": [
                {
                    "name": "data",
                    "type": {
                        "type": "record",
                        "name": "data",
                        "fields": [
                            {"name": name, "type": ["null", avro] if nb else avro}
                            for name, _, avro, nb in FIELDS
                        ],
                    },
                },
                {"name": "time", "type": "long"},
                {"name": "diff", "type": "long"},
            ],
        }
    )
    start = 0
    for row, t, d, end in zip(rows, times, diffs, ends):
        out = io.BytesIO()
        fastavro.schemaless_writer(
            out, schema, {"data": dict(zip([f[0] for f in FIELDS], row)), "time": t, "diff": d}
        )
        assert bytes(buf[start:end]) == out.getvalue(), row
        start = end


def test_sliced_arrays_and_empty():
    col = pa.array(["a", None, "bcd", "", "e"]).slice(1, 3)
    buf, ends = encode_records(
        [col, pa.array([1, 2, 3], pa.int64()), pa.array([1, 1, 1], pa.int64())],
        [True, False, False],
    )
    assert bytes(buf) == b"\x00\x02\x02" + b"\x02\x06bcd\x04\x02" + b"\x02\x00\x06\x02"
    buf, ends = encode_records([pa.array([], pa.int64())] * 3, [False] * 3)
    assert len(buf) == 0 and len(ends) == 0


def test_a_block_of_longs_is_fastavros_bytes_either_side_of_the_small_size():
    """`long_block` writes up to `SMALL_BLOCK` rows in plain Python and more with numpy: both
    give fastavro's bytes, for single longs and for records of two, and refuse what is not a
    plain long."""
    rng = random.Random(7)
    longs = fastavro.parse_schema({"type": "array", "items": "long"})
    pairs = fastavro.parse_schema(
        {
            "type": "array",
            "items": {
                "type": "record",
                "name": "pair",
                "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "long"}],
            },
        }
    )

    def value() -> int:
        return rng.choice([rng.randint(-(2**63), 2**63 - 1), rng.randint(-200, 200), 0])

    for n in (1, 2, SMALL_BLOCK - 1, SMALL_BLOCK, SMALL_BLOCK + 1, 3 * SMALL_BLOCK):
        singles = [value() for _ in range(n)]
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, longs, singles)
        assert long_block(singles) == buf.getvalue(), n
        records = [(value(), value()) for _ in range(n)]
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, pairs, [{"a": a, "b": b} for a, b in records])
        assert long_block(records) == buf.getvalue(), n
    for bad in ([True], [2**63], [-(2**63) - 1], [(1, 2), (3,)], [1, (2, 3)], [1.0], [()]):
        assert long_block(bad) is None, bad
        assert long_block(bad * (SMALL_BLOCK + 1)) is None, bad
