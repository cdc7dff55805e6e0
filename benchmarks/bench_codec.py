"""Encode/decode rates of the CDC codec next to plain fastavro on the same data.

    python benchmarks/bench_codec.py [--updates 500000] [--batch 1000] [--repeat 3] [--json FILE]

Data: updates of (k long, v string, n nullable int), time 5, diff 1, in messages of --batch
updates. Peers: fastavro's schemaless_writer/reader with the full union schema per message, and
fastavro writing the array branch directly (index byte + array schema). --repeat rounds, each
timing every contender once, interleaved; prints the best of the rounds, and ``--json FILE``
writes each round's seconds and the ratios to fastavro's full union round by round.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import fastavro

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import ratio, write_json  # noqa: E402

from cdc_emitter.protocol import Update  # noqa: E402
from cdc_emitter.protocol.codec import CdcCodec, union_schema  # noqa: E402

DATA = {
    "type": "record",
    "name": "data",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "v", "type": "string"},
        {"name": "n", "type": ["null", "int"]},
    ],
}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=500_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", default=None, help="also write the results to FILE")
    args = ap.parse_args()
    n, b = args.updates, args.batch

    rows = [(i, f"value-{i}", None if i % 3 == 0 else i) for i in range(n)]
    tuple_batches = [[Update(r, 5, 1) for r in rows[i : i + b]] for i in range(0, n, b)]
    dict_batches = [
        [{"data": {"k": k, "v": v, "n": x}, "time": 5, "diff": 1} for k, v, x in rows[i : i + b]]
        for i in range(0, n, b)
    ]
    dict_updates = [[Update(r["data"], 5, 1) for r in batch] for batch in dict_batches]
    codec = CdcCodec(DATA, framing="raw")
    union = fastavro.parse_schema(union_schema(DATA))
    array = fastavro.parse_schema(union_schema(DATA)[0])
    item = fastavro.parse_schema(union_schema(DATA)[0]["items"])

    def fa_union_encode():
        out = []
        for batch in dict_batches:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, union, batch)
            out.append(buf.getvalue())
        return out

    def fa_direct_encode():
        out = []
        for batch in dict_batches:
            buf = io.BytesIO()
            buf.write(b"\x00")
            fastavro.schemaless_writer(buf, array, batch)
            out.append(buf.getvalue())
        return out

    messages = fa_union_encode()
    assert messages == [m for batch in tuple_batches for m in codec.encode_updates(batch)]
    items = []
    for batch in dict_batches[:1]:
        for rec in batch:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, item, rec)
            items.append(buf.getvalue())
    items = items * (n // len(items))
    big = CdcCodec(DATA, framing="raw", max_message_bytes=len(messages[0]) + 64)

    def fa_union_decode():
        for m in messages:
            fastavro.schemaless_reader(io.BytesIO(m), union, None)

    def fa_direct_decode():
        for m in messages:
            buf = io.BytesIO(m)
            buf.seek(1)
            fastavro.schemaless_reader(buf, array, None)

    contenders = {
        "encode: fastavro, full union per message (dict rows)": fa_union_encode,
        "encode: fastavro, branch written directly (dict rows)": fa_direct_encode,
        "encode: CdcCodec.encode_updates (tuple rows)": lambda: [
            codec.encode_updates(x) for x in tuple_batches
        ],
        "encode: CdcCodec.encode_updates (dict rows)": lambda: [
            codec.encode_updates(x) for x in dict_updates
        ],
        "pack:   CdcCodec.pack_items (pre-encoded items)": lambda: list(big.pack_items(items)),
        "decode: fastavro, full union per message (dicts)": fa_union_decode,
        "decode: fastavro, branch read directly (dicts)": fa_direct_decode,
        "decode: CdcCodec.decode (Update tuples)": lambda: [codec.decode(m) for m in messages],
    }
    rounds = [{name: timed(fn) for name, fn in contenders.items()} for _ in range(args.repeat)]
    rates = {name: min(r[name] for r in rounds) for name in contenders}  # the best round
    print(
        f"{n} updates of (k long, v string, n nullable int), {b} per message "
        f"(~{len(messages[0])} bytes), best of {args.repeat}"
    )
    enc = rates["encode: fastavro, full union per message (dict rows)"]
    dec = rates["decode: fastavro, full union per message (dicts)"]
    for name, secs in rates.items():
        speed = (dec if name.startswith("decode") else enc) / secs
        print(f"  {name:<52} {n / secs:>12,.0f} updates/s   {speed:5.2f}x fastavro union")
    union_encode = "encode: fastavro, full union per message (dict rows)"
    union_decode = "decode: fastavro, full union per message (dicts)"
    ratios = [
        ratio(
            short,
            name,
            peer,
            [r[peer] / r[name] for r in rounds],
            meaning="speed: updates/s of ours over fastavro's with the full union, same round",
        )
        for short, name, peer in (
            (
                "encode (tuples)/fastavro",
                "encode: CdcCodec.encode_updates (tuple rows)",
                union_encode,
            ),
            (
                "encode (dicts)/fastavro",
                "encode: CdcCodec.encode_updates (dict rows)",
                union_encode,
            ),
            ("decode/fastavro", "decode: CdcCodec.decode (Update tuples)", union_decode),
        )
    ]
    write_json(
        args.json,
        "codec",
        {"updates": n, "batch": b, "rounds": args.repeat, "message_bytes": len(messages[0])},
        rounds,
        ratios,
    )


if __name__ == "__main__":
    main()
