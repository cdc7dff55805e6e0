"""Decoding in worker processes: the results of decoding here, in submission order, with every
NaN the one `NAN` object again."""

from __future__ import annotations

import datetime
import decimal

from cdc_emitter.protocol import NAN, Progress, Update, canonical_nan
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.read.decode_pool import ROWS, DecodePool, decode_chunk, dump_entries

SCHEMA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "x", "type": ["null", "double"]}],
}


def test_workers_give_what_decoding_here_gives_nan_included():
    codec = CdcCodec(SCHEMA, framing="raw")
    with_nan = codec.encode_updates(
        [Update((1, float("nan")), 0, 1), Update((2, -0.0), 0, 1), Update((3, None), 0, 1)]
    )
    plain = codec.encode_updates([Update((k, k / 2), 1, -1) for k in range(1000)])
    progress = codec.encode_progress(Progress((0,), (2,), ((0, 3), (1, 1000))))
    chunks = [
        [(0, i, v) for i, v in enumerate(with_nan)],
        [(1, i, v) for i, v in enumerate(plain)] + [(1, len(plain), progress)],
        [(2, 0, b"\x00\x09")],  # undecodable
    ]
    with DecodePool(codec, 2) as pool:
        for chunk in chunks:
            pool.submit(chunk)
        results = [pool.next_result() for _ in chunks]
        assert pool.broken is None
    assert results == [decode_chunk(codec, chunk) for chunk in chunks]
    (kind, _p, _o, rows), *_ = results[0]
    assert kind == ROWS
    assert rows[0][0][1] is NAN  # one NaN object: equal data are equal
    assert str(rows[1][0][1]) == "0.0"


def test_dates_timestamps_and_decimals_come_back_as_decoding_here_gives_them():
    stamp = {"type": "long", "logicalType": "timestamp-micros"}
    day = {"type": "int", "logicalType": "date"}
    money = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
    schema = {
        "type": "record",
        "name": "data",
        "fields": [
            {"name": "k", "type": "long"},
            {"name": "at", "type": ["null", stamp]},
            {"name": "day", "type": day},
            {"name": "x", "type": "double"},
            {"name": "amount", "type": ["null", money]},
        ],
    }
    codec = CdcCodec(schema, framing="raw")
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    updates = [
        Update(
            (
                k,
                None if k % 7 == 0 else epoch + datetime.timedelta(microseconds=k * 999_999),
                datetime.date(2026, 1, 1) + datetime.timedelta(days=k % 400),
                float("nan") if k % 5 == 0 else -k / 3,
                None if k % 11 == 0 else decimal.Decimal(k * 7919 - 10**6).scaleb(-2),
            ),
            k % 3,
            1,
        )
        for k in range(2000)
    ]
    chunk = [(0, i, v) for i, v in enumerate(codec.encode_updates(updates))]
    assert dump_entries(decode_chunk(codec, chunk, by_column=True))[:1] == b"M"  # marshal-ed
    with DecodePool(codec, 1) as pool:
        pool.submit(chunk)
        got = pool.next_result()
        assert pool.broken is None
    assert repr(got) == repr(decode_chunk(codec, chunk))  # decimals with their exponent
    assert [u for _k, _p, _o, rows in got for u in rows] == [
        (canonical_nan(d), t, x) for d, t, x in updates
    ]
