"""Integration fixtures: one local Spark session for the whole test session.

``local[2,2]``: two cores, and a failed task is retried once (Spark's local mode only retries
with the ``local[N,F]`` master), which the task-retry test relies on. Shuffles use 4 partitions;
the UI is off; times are UTC; plans run interpreted, without generated code (the tests' data is
tiny; the benchmarks, on real sizes, keep Spark's defaults, and so do the tests of wide and
nested types, through the ``generated_code`` fixture). ``CDC_TEST_SPARK_CONF`` adds or
overrides settings (``spark.sql.codegen.wholeStage=true,...``).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_DATA_CONF


def spark_packages() -> str:
    """Maven coordinates of spark-avro and spark-sql-kafka-0-10 at the installed Spark and Scala
    versions (what :func:`cdc_emitter.configure_spark` adds; ``CDC_SPARK_PACKAGES_VERSION``
    chooses another version).

    The session loads them through ``spark.jars.packages`` (fetched from Maven Central once, then
    from Ivy's cache), so the sink's JVM data path is what the tests run by default, never skipped.
    ``CDC_SPARK_AVRO_JAR`` names local jars instead (comma-separated; for machines without Maven
    Central).
    """
    from cdc_emitter.spark.setup import sink_packages

    return ",".join(sink_packages())


#: Starts a Spark session with the packages named in argv[1], then stops it: Spark resolves them
#: through Ivy into its cache on the way.
_RESOLVE = """
import sys
from pyspark.sql import SparkSession
SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").config(
    "spark.jars.packages", sys.argv[1]
).getOrCreate().stop()
"""


def _in_ivy_cache(coordinate: str) -> bool:
    """Whether Ivy has retrieved ``group:artifact:version`` before, in the default Ivy home of
    Spark 4 (``~/.ivy2.5.2``) or Spark 3 (``~/.ivy2``)."""
    group, artifact, version = coordinate.split(":")[:3]
    name = f"{group}_{artifact}-{version}.jar"
    return any((Path.home() / home / "jars" / name).is_file() for home in (".ivy2.5.2", ".ivy2"))


@pytest.fixture(scope="session", autouse=True)
def _spark_packages_cached(request: pytest.FixtureRequest) -> None:
    """The Maven packages the tests' Spark sessions and jobs load, in Ivy's cache before any test
    starts one.

    Ivy's cache is not safe for processes that download into it at once: on a new machine, two
    JVMs resolving spark-avro together (the two xdist workers' sessions, two writer jobs) left
    one of them with "unresolved dependency ... not found". So the first session on a machine
    resolves them here, one process at a time (a lock in the tests' cache dir); later
    resolutions only read the cache. Nothing runs when they are cached already, with
    ``CDC_SPARK_AVRO_JAR``, or when no test of the run is marked ``spark`` (a Kafka-only run
    needs neither Spark nor Maven)."""
    if os.environ.get("CDC_SPARK_AVRO_JAR", "").strip():
        return
    if not any(item.get_closest_marker("spark") for item in request.session.items):
        return
    import pyspark

    from cdc_emitter.spark.session import delta_package
    from cdc_emitter.spark.setup import connect_server_package, sink_packages

    # the Connect server's package on Spark 3.5, for scripts/spark-local start --connect
    wanted = [*sink_packages(), delta_package(pyspark.__version__), connect_server_package()]
    coordinates = [c for c in wanted if c is not None]
    if all(_in_ivy_cache(c) for c in coordinates):
        return
    from jvm_archives import cache_root

    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "spark-packages.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process resolves, the others then find the cache
        missing = [c for c in coordinates if not _in_ivy_cache(c)]
        if missing:
            done = subprocess.run(
                [sys.executable, "-c", _RESOLVE, ",".join(missing)],
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if done.returncode != 0:
                pytest.fail(
                    f"cannot fetch the Spark packages {', '.join(missing)} from Maven Central "
                    f"(exit {done.returncode}):\n{done.stderr[-3000:]}",
                    pytrace=False,
                )


def extra_conf() -> dict[str, str]:
    """Settings for the test session from ``CDC_TEST_SPARK_CONF`` (``key=value`` pairs, comma
    separated): to measure what a setting does to the suite without editing it."""
    text = os.environ.get("CDC_TEST_SPARK_CONF", "").strip()
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    bad = [item for item in pairs if len(item) != 2]
    if bad:
        raise pytest.UsageError(f"CDC_TEST_SPARK_CONF: {'='.join(bad[0])!r} is not key=value")
    return {key.strip(): value.strip() for key, value in pairs}


@pytest.fixture(scope="session")
def spark(request, tmp_path_factory):
    if request.config.getoption("quick"):  # see tests/conftest.py
        pytest.fail(f"{request.node.nodeid} starts Spark, which --quick never does", pytrace=False)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder
    jar = os.environ.get("CDC_SPARK_AVRO_JAR", "").strip()
    if jar:
        builder = builder.config("spark.jars", jar)
    else:
        builder = builder.config("spark.jars.packages", spark_packages())
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
        # the tests' batches are a few rows: compiling each plan's Java costs more than running
        # it interpreted (two modules: 269 s with code generation, 224 s without)
        .config(map=TINY_DATA_CONF)
        .config(map=extra_conf())
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def generated_code(spark):
    """Spark's own default for the test: plans compiled to Java (the session runs them
    interpreted), for tests of wide and nested types, where generated code has limits of its
    own (a method's 64 KB)."""
    names = ("spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode")
    before = {name: spark.conf.get(name) for name in names}
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    spark.conf.set("spark.sql.codegen.factoryMode", "FALLBACK")
    yield
    for name, value in before.items():
        spark.conf.set(name, value)


@pytest.fixture(params=["local", "spark"])
def engine(request):
    """The ``verify --engine`` a CLI test runs with: both must print the same, exit the same.
    The Spark engine runs on this session's Spark (the CLI's session is this one)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
        request.node.add_marker(pytest.mark.spark)
    return request.param
