"""Encode/decode rates of the CDC codec next to plain fastavro on the same data.

    python scripts/bench_codec.py [--updates 500000] [--batch 1000] [--repeat 3]

Data: updates of (k long, v string, n nullable int), time 5, diff 1, in messages of --batch
updates. Peers: fastavro's schemaless_writer/reader with the full union schema per message, and
fastavro writing the array branch directly (index byte + array schema). Best of --repeat runs.
"""

from __future__ import annotations

import argparse
import io
import time

import fastavro

from cdc_emitter.protocol.codec import CdcCodec, union_schema
from cdc_emitter.protocol.core import Update

DATA = {
    "type": "record",
    "name": "data",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "v", "type": "string"},
        {"name": "n", "type": ["null", "int"]},
    ],
}


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=500_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
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

    rates = {
        "encode: fastavro, full union per message (dict rows)": best(fa_union_encode, args.repeat),
        "encode: fastavro, branch written directly (dict rows)": best(
            fa_direct_encode, args.repeat
        ),
        "encode: CdcCodec.encode_updates (tuple rows)": best(
            lambda: [codec.encode_updates(x) for x in tuple_batches], args.repeat
        ),
        "encode: CdcCodec.encode_updates (dict rows)": best(
            lambda: [codec.encode_updates(x) for x in dict_updates], args.repeat
        ),
        "pack:   CdcCodec.pack_items (pre-encoded items)": best(
            lambda: list(big.pack_items(items)), args.repeat
        ),
        "decode: fastavro, full union per message (dicts)": best(fa_union_decode, args.repeat),
        "decode: fastavro, branch read directly (dicts)": best(fa_direct_decode, args.repeat),
        "decode: CdcCodec.decode (Update tuples)": best(
            lambda: [codec.decode(m) for m in messages], args.repeat
        ),
    }
    print(
        f"{n} updates of (k long, v string, n nullable int), {b} per message "
        f"(~{len(messages[0])} bytes), best of {args.repeat}"
    )
    enc = rates["encode: fastavro, full union per message (dict rows)"]
    dec = rates["decode: fastavro, full union per message (dicts)"]
    for name, secs in rates.items():
        ratio = (dec if name.startswith("decode") else enc) / secs
        print(f"  {name:<52} {n / secs:>12,.0f} updates/s   {ratio:5.2f}x fastavro union")


if __name__ == "__main__":
    main()
