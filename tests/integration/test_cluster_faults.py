"""The sink on a 3-node cluster (replication 3, min.insync.replicas 2) whose nodes fail: a
partition leader stopped in the middle of a batch, and two nodes down at once."""

from __future__ import annotations

import time
import uuid

import pytest
from helpers import as_history, read_history

from cdc_emitter import CdcSink
from cdc_emitter.errors import CdcError
from cdc_emitter.kafka.topics import ensure_topic
from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.spark.schema import data_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROWS = 50_000


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def _rows(batch: int):
    return [((k, str(k % 7)), batch, 1) for k in range(batch * ROWS, (batch + 1) * ROWS)]


def _write(spark, sink, batch: int):
    df = spark.range(batch * ROWS, (batch + 1) * ROWS).selectExpr(
        "id AS k", "cast(id % 7 AS string) AS v"
    )
    return sink(df, batch), df


def test_a_partition_leader_stopped_mid_batch(spark, kafka_cluster, tmp_path, monkeypatch):
    from cdc_emitter.kafka.claims import ClaimProducer

    bootstrap = kafka_cluster.bootstrap_servers
    topic = f"cluster-leader-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True, partitions=3, replication=3)
    checkpoint = str(tmp_path / "checkpoint")
    _write(spark, CdcSink(bootstrap, topic, checkpoint_location=checkpoint), 0)
    sink = CdcSink(bootstrap, topic, checkpoint_location=checkpoint)
    claimed, stopped = ClaimProducer.commit, []

    def claim_then_leader_down(*args, **kwargs):
        # the batch is claimed; the leader of partition 1, where updates go, dies before them
        offset = claimed(*args, **kwargs)
        if not stopped:
            stopped.append(_leader(bootstrap, topic, 1))
            kafka_cluster.stop_node(stopped[0])
        return offset

    monkeypatch.setattr(ClaimProducer, "commit", claim_then_leader_down)
    try:
        result, df = _write(spark, sink, 1)  # replicas take over: the batch goes through
    finally:
        monkeypatch.undo()
        kafka_cluster.start_node(stopped[0])
    assert (result.lower, result.upper, result.updates) == (1, 2, ROWS)
    assert _leader(bootstrap, topic, 1) != -1
    history, frontier, violations, _ = read_history(
        bootstrap, topic, CdcCodec(data_schema(df.schema))
    )
    assert (violations, frontier) == ([], (2,))
    assert history == as_history(_rows(0) + _rows(1))


def test_two_nodes_down_fail_the_batch_and_a_rerun_after_recovery_is_exact(
    spark, kafka_cluster, tmp_path, monkeypatch
):
    from cdc_emitter.kafka.claims import ClaimProducer

    bootstrap = kafka_cluster.bootstrap_servers
    topic = f"cluster-down-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, create=True, partitions=3, replication=3)
    checkpoint = str(tmp_path / "checkpoint")
    settings = {"message.timeout.ms": 6_000}  # the delivery error within seconds, not 2 minutes
    sink = CdcSink(bootstrap, topic, checkpoint_location=checkpoint, producer_config=settings)
    claimed, down = ClaimProducer.commit, []

    def claim_then_two_down(*args, **kwargs):  # two of three nodes die once the batch is claimed
        offset = claimed(*args, **kwargs)
        if not down:
            down.append(1)
            kafka_cluster.stop_node(2, 3)
        return offset

    monkeypatch.setattr(ClaimProducer, "commit", claim_then_two_down)
    began = time.monotonic()
    try:
        with pytest.raises(CdcError) as info:
            _write(spark, sink, 0)
        waited = time.monotonic() - began
    finally:
        monkeypatch.undo()
        kafka_cluster.start_node(2, 3)
    first = str(info.value).splitlines()[0]
    assert topic in first and waited < 60, (
        waited,
        first,
    )  # bounded by message.timeout.ms, not its default
    # readers wait on the claimed time; the query restarts: batch 0 again, under its claim
    for _attempt in range(5):
        try:
            result, df = _write(spark, CdcSink(bootstrap, topic, checkpoint_location=checkpoint), 0)
            break
        except CdcError:  # the cluster may still be electing leaders
            time.sleep(3)
    else:
        pytest.fail("batch 0 did not land after the cluster recovered")
    assert (result.lower, result.upper, result.reused) == (0, 1, True)
    history, frontier, violations, _ = read_history(
        bootstrap, topic, CdcCodec(data_schema(df.schema))
    )
    assert (violations, frontier) == ([], (1,))
    assert history == as_history(_rows(0))
