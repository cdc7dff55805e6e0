"""configure_spark / sink_packages / connect_server_package: coordinates at the right versions,
packages already set kept."""

from __future__ import annotations

import pyspark
import pytest

from cdc_emitter import configure_spark
from cdc_emitter.spark.setup import connect_server_package, scala_version, sink_packages


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("CDC_SPARK_PACKAGES_VERSION", raising=False)


def test_packages_follow_the_installed_pyspark():
    scala, version = scala_version(), pyspark.__version__
    assert sink_packages() == [
        f"org.apache.spark:spark-avro_{scala}:{version}",
        f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}",
    ]


def test_an_explicit_version_wins_over_the_environment_which_wins_over_pyspark(monkeypatch):
    monkeypatch.setenv("CDC_SPARK_PACKAGES_VERSION", " 4.2.0 ")
    assert {c.rsplit(":", 1)[1] for c in sink_packages()} == {"4.2.0"}
    assert {c.rsplit(":", 1)[1] for c in sink_packages("3.5.7")} == {"3.5.7"}


def test_the_connect_server_package_only_where_pyspark_lacks_the_server(monkeypatch, tmp_path):
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "scala-library-2.12.18.jar").touch()
    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "__init__.py"))
    monkeypatch.setattr(pyspark, "__version__", "3.5.7")
    assert connect_server_package() == "org.apache.spark:spark-connect_2.12:3.5.7"
    (tmp_path / "jars" / "spark-connect_2.12-3.5.7.jar").touch()
    assert connect_server_package() is None


class _Builder:
    """Stands in for ``SparkSession.Builder``, whose options are shared by every builder of the
    process (setting them here would reach the integration tests' session)."""

    def __init__(self, options: dict):
        self._options = dict(options)

    def config(self, key: str, value: str) -> _Builder:
        return _Builder({**self._options, key: value})


def test_configure_spark_keeps_packages_already_set_and_adds_each_once():
    builder = _Builder({"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"})
    configured = configure_spark(
        builder, extra_packages=[sink_packages()[0], "org.example:extra:1"]
    )
    assert configured._options["spark.jars.packages"].split(",") == [
        "io.delta:delta-spark_2.13:4.0.0",
        *sink_packages(),
        "org.example:extra:1",
    ]
