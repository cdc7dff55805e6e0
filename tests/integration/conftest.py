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


def spark_avro_package() -> str:
    """Maven coordinates of spark-avro at exactly the installed Spark and Scala versions.

    The session loads it through ``spark.jars.packages`` (fetched from Maven Central once, then
    from Ivy's cache), so the sink's ``to_avro`` encoder is tested on every run, never skipped.
    ``CDC_SPARK_AVRO_JAR`` names a local jar instead (for machines without Maven Central).
    """
    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "scala-library-*.jar"))
    scala = "2.13"
    if jars:
        scala = ".".join(os.path.basename(jars[0])[len("scala-library-"):].split(".")[:2])
    return f"org.apache.spark:spark-avro_{scala}:{pyspark.__version__}"


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder
    jar = os.environ.get("CDC_SPARK_AVRO_JAR", "").strip()
    if jar:
        builder = builder.config("spark.jars", jar)
    else:
        builder = builder.config("spark.jars.packages", spark_avro_package())
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
