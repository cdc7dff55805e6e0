"""The sink and verify through a loopback proxy that cuts and stalls every Kafka connection
(``faultproxy.FaultProxy``): each batch lands exactly, retried where it failed, and nothing is
lost or doubled."""

from __future__ import annotations

import threading
import uuid

import pytest
from faultproxy import flapping
from helpers import as_history, read_history

from cdc_emitter import CdcSink
from cdc_emitter.errors import CdcError
from cdc_emitter.kafka.topics import ensure_topic
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.read.verify import verify_topic
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROWS = 60_000
BATCHES = 3


def test_batches_land_exactly_through_cut_and_stalled_connections(spark, proxied_kafka, tmp_path):
    bootstrap, proxy = proxied_kafka
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True, partitions=3)
    checkpoint = str(tmp_path / "checkpoint")
    cuts_before, retried = proxy.cuts, 0
    settings = {"message.timeout.ms": 20_000}
    for batch in range(BATCHES):
        df = spark.range(batch * ROWS, (batch + 1) * ROWS).selectExpr(
            "id AS k", "cast(id % 97 AS string) AS v"
        )
        stop = threading.Event()
        # every connection cut 0.3 s into the batch (a batch can take less than 1.5 s), then
        # every 1.5 s while it runs
        flap = flapping(proxy, 1.5, stop, first=0.3)
        if batch == 1:
            proxy.stall(3.0)  # and in the middle one, nothing moves for 3 s first
        try:
            for _attempt in range(6):  # as Spark re-runs a failed foreachBatch after a restart
                try:
                    CdcSink(
                        bootstrap, topic, checkpoint_location=checkpoint, producer_config=settings
                    )(df, batch)
                    break
                except CdcError:
                    retried += 1
            else:
                pytest.fail(f"batch {batch} did not land in 6 attempts")
        finally:
            stop.set()
            flap.join()
    cuts = proxy.cuts - cuts_before
    codec = CdcCodec(data_schema(df.schema))
    history, frontier, violations, reader = read_history(bootstrap, topic, codec)
    expected = as_history([((k, str(k % 97)), k // ROWS, 1) for k in range(BATCHES * ROWS)])
    lost = len(set(expected) - set(history))
    print(
        f"\nnetwork faults: {cuts} cuts of every connection and 1 stall of 3 s injected; "
        f"{retried} batch attempts failed and were retried; {lost} updates lost; "
        f"{reader.duplicates} duplicate updates dropped by the reader"
    )
    assert cuts >= BATCHES
    assert (violations, frontier, lost) == ([], (BATCHES,), 0)
    assert history == expected


def test_verify_reads_exactly_through_cut_connections(spark, proxied_kafka):
    bootstrap, proxy = proxied_kafka
    topic = f"faults-verify-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True, partitions=3)
    df = spark.range(0, 200_000).selectExpr("id AS k", "cast(id % 13 AS string) AS v")
    CdcSink(bootstrap, topic).write(df, time=0, close=True)
    codec = CdcCodec(data_schema(df.schema))
    stop = threading.Event()
    flap = flapping(proxy, 0.3, stop)
    try:
        result = verify_topic(bootstrap, topic, codec, until_closed=True, timeout=120, workers=0)
    finally:
        stop.set()
        flap.join()
    assert (result.verdict, result.frontier, len(result.collection)) == ("verified", (), 200_000)
