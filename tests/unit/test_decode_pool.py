"""Decoding in worker processes: the results of decoding here, in submission order, with every
NaN the one `NAN` object again."""

from __future__ import annotations

from cdc_emitter.protocol import NAN, Progress, Update
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.read.decode_pool import ROWS, DecodePool, decode_chunk

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
