"""Spark session set-up for the sink: `configure_spark` adds what the JVM data path needs.

Guarantees: the packages match the running PySpark's Spark and Scala versions (Spark's own
``spark-avro`` and ``spark-sql-kafka-0-10``, from Maven Central); packages already configured on
the builder are kept; nothing of cdc-emitter is needed on the executors of a session built this
way (the sink's ``encoder="auto"`` picks the JVM data path there).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["configure_spark", "connect_server_package", "sink_packages", "scala_version"]


def scala_version() -> str:
    """The Scala version of the installed PySpark's jars (``2.13`` when none are installed, as
    with a Spark Connect client: every Spark 4 build is 2.13)."""
    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "scala-library-*.jar"))
    if not jars:
        return "2.13"
    return ".".join(os.path.basename(jars[0])[len("scala-library-") :].split(".")[:2])


def _pyspark_release() -> str:
    """The installed PySpark's version without a local build's ``+...`` suffix."""
    import pyspark

    return pyspark.__version__.split("+")[0]


def connect_server_package() -> str | None:
    """The Maven coordinate of Spark Connect's server for the installed PySpark, when its jars
    lack it.

    Spark 4 ships the server in its jars; Spark 3.5 publishes it as a package of its own
    (``spark-connect``), which a Connect server started from PySpark's jars must load. It runs
    inside that Spark, so its version is PySpark's own (``CDC_SPARK_PACKAGES_VERSION``, which
    `sink_packages` follows, does not apply).

    Returns:
        ``org.apache.spark:spark-connect_<scala>:<version>``, or None when PySpark's jars hold
        the server already.
    """
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    if glob.glob(os.path.join(jars, "spark-connect_*.jar")):
        return None
    return f"org.apache.spark:spark-connect_{scala_version()}:{_pyspark_release()}"


def sink_packages(spark_version: str | None = None) -> list[str]:
    """The Maven coordinates of the two Spark packages the sink's JVM data path uses.

    These are Spark's own ``spark-avro`` and ``spark-sql-kafka-0-10``, for the Scala version of
    the installed PySpark.

    Args:
        spark_version: The packages' version. Default: ``$CDC_SPARK_PACKAGES_VERSION`` (for a
            PySpark release whose packages your Maven repository does not have yet: the nearest
            release below it of the same major version), else the installed PySpark's version.

    Returns:
        The two coordinates, ``group:artifact:version``.
    """
    version = (
        spark_version
        or os.environ.get("CDC_SPARK_PACKAGES_VERSION", "").strip()
        or _pyspark_release()
    )
    scala = scala_version()
    return [
        f"org.apache.spark:spark-avro_{scala}:{version}",
        f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}",
    ]


def configure_spark(builder: Any, extra_packages: Sequence[str] = ()) -> Any:
    """Make a session builder load the sink's packages.

    Follows Delta's ``configure_spark_with_delta_pip`` idiom::

        spark = configure_spark(SparkSession.builder.master("spark://host:7077")).getOrCreate()

    A Spark Connect server loads packages itself: start it with ``--packages`` set to
    `sink_packages` (``scripts/spark-local start --connect`` does).

    Args:
        builder: A ``SparkSession.Builder``. Packages already set on it are kept.
        extra_packages: More Maven coordinates to load.

    Returns:
        The builder, with ``spark.jars.packages`` set to its packages, `sink_packages` and
        ``extra_packages``, each once.
    """
    present = getattr(builder, "_options", {}).get("spark.jars.packages", "")
    packages: list[str] = []
    for coords in [*present.split(","), *sink_packages(), *extra_packages]:
        coords = coords.strip()
        if coords and coords not in packages:
            packages.append(coords)
    return builder.config("spark.jars.packages", ",".join(packages))
