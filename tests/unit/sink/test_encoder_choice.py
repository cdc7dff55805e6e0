"""``encoder="auto"``: which Spark packages a session is probed for, and how often (stand-in
sessions, no Spark)."""

from __future__ import annotations

import pytest

from cdc_emitter.sink import paths


class Session:
    """A stand-in for a SparkSession: the probes are replaced, so nothing is asked of it."""


@pytest.fixture
def probes(monkeypatch):
    """Probes that answer from ``has`` and record each call as ``(package, session)``."""
    calls: list[tuple[str, Session]] = []
    has: dict[str, bool] = {"spark-avro": True, "spark-sql-kafka-0-10": True}

    def probe(package: str):
        def probe_session(session) -> bool:
            calls.append((package, session))
            return has[package]

        return probe_session

    monkeypatch.setattr(paths, "probe_avro", probe("spark-avro"))
    monkeypatch.setattr(paths, "probe_kafka", probe("spark-sql-kafka-0-10"))
    return calls, has


def test_a_session_with_both_packages_is_probed_once(probes):
    calls, _ = probes
    session, other = Session(), Session()
    assert paths.missing_package(session) is None
    assert paths.resolve_encoder(session, "localhost:9092", "t", {}) == "jvm"
    assert paths.missing_package(session) is None
    assert calls == [("spark-avro", session), ("spark-sql-kafka-0-10", session)]
    assert paths.missing_package(other) is None  # another session is probed on its own
    assert calls[2:] == [("spark-avro", other), ("spark-sql-kafka-0-10", other)]


@pytest.mark.parametrize("missing", ["spark-avro", "spark-sql-kafka-0-10"])
def test_a_session_without_a_package_is_probed_each_time(probes, missing):
    calls, has = probes
    has[missing] = False
    session = Session()
    probed = ["spark-avro"] if missing == "spark-avro" else ["spark-avro", missing]
    for n in (1, 2):
        assert paths.missing_package(session) == missing
        assert [package for package, _ in calls] == probed * n
    assert paths.resolve_encoder(session, "localhost:9092", "t", {}) == "python"
    has[missing] = True  # loaded later (spark.jars added to a running session): found
    assert paths.missing_package(session) is None
    assert paths.resolve_encoder(session, "localhost:9092", "t", {}) == "jvm"
