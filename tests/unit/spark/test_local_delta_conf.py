"""Delta's state rebuilt with one task per core in a local session the CLI makes, unless the
user set it, and never on a cluster."""

from __future__ import annotations

from cdc_emitter.spark.session import DELTA_SNAPSHOT_PARTITIONS, local_delta_conf


def test_a_local_session_rebuilds_delta_state_with_a_task_per_core():
    assert local_delta_conf("local[*]", set(), 2) == {DELTA_SNAPSHOT_PARTITIONS: "2"}
    assert local_delta_conf("local[4]", {"spark.app.name"}, 4) == {DELTA_SNAPSHOT_PARTITIONS: "4"}
    assert local_delta_conf("local", set(), 0) == {DELTA_SNAPSHOT_PARTITIONS: "1"}


def test_a_setting_the_user_gave_or_a_cluster_is_left_alone():
    assert local_delta_conf("local[2]", {DELTA_SNAPSHOT_PARTITIONS}, 2) == {}
    assert local_delta_conf("spark://10.0.0.1:7077", set(), 2) == {}
    assert local_delta_conf("yarn", set(), 16) == {}
