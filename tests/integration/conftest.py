"""Integration fixtures: one local Spark session for the whole test session.

``local[2,2]``: two cores, and a failed task is retried once (Spark's local mode only retries
with the ``local[N,F]`` master), which the task-retry test relies on. Shuffles use 4 partitions;
the UI is off; times are UTC.
"""

from __future__ import annotations

import glob
import os
import sys

import pytest


def spark_avro_jar() -> str | None:
    """A spark-avro jar already on this machine (``CDC_SPARK_AVRO_JAR``, or Spark's ivy cache).

    Loaded into the test session when found, so the sink's ``to_avro`` encoder is tested too;
    nothing is downloaded. Without one, the tests of that encoder are skipped.
    """
    env = os.environ.get("CDC_SPARK_AVRO_JAR", "").strip()
    if env:
        return env
    for pattern in ("~/.ivy2*/jars/org.apache.spark_spark-avro_2.13-*.jar",
                    "~/.m2/repository/org/apache/spark/spark-avro_2.13/*/spark-avro_2.13-*.jar"):
        found = sorted(glob.glob(os.path.expanduser(pattern)))
        if found:
            return found[-1]
    return None


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder
    jar = spark_avro_jar()
    if jar:
        builder = builder.config("spark.jars", jar)
    session = (
        builder.master("local[2,2]")
        .appName("cdc-emitter-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.minBatchesToRetain", "5")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
