"""Spark sessions for the CLI's Spark-backed commands (``export``, ``schema``, ``convert``).

Guarantees:
  * a session that fails to start raises `ConfigError` whose first
    line is Spark's own cause (the Java exception behind a Py4J error);
  * the session's executors run the interpreter this process runs (the sink encodes there).

Imports PySpark only when a session is made: the CLI's commands that need no Spark start fast.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from cdc_emitter.errors import ConfigError
from cdc_emitter.spark.errors import spark_error_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DELTA_PACKAGES", "delta_package", "reader_conf", "spark_session"]

#: The Delta Lake package built for each Spark major.minor version (the one --format delta needs).
DELTA_PACKAGES = {
    "3.5": "io.delta:delta-spark_2.12:3.3.2",
    "4.0": "io.delta:delta-spark_2.13:4.0.0",
    "4.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
    "4.2": "io.delta:delta-spark_4.2_2.13:4.4.0",
}


def delta_package(spark_version: str) -> str | None:
    """The Delta Lake package built for Spark ``spark_version`` (``4.1.1``), or None when Delta
    publishes none for that release (see `DELTA_PACKAGES`)."""
    return DELTA_PACKAGES.get(".".join(spark_version.split(".")[:2]))


_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def spark_session(
    app: str,
    packages: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
    fmt: str | None = None,
    remote: str | None = None,
) -> SparkSession:
    """A Spark session loading the sink's packages and ``packages``, with ``conf`` and the
    settings reading ``fmt`` needs; with ``remote`` (``sc://host:port``, or ``SPARK_REMOTE``), a
    Spark Connect session instead, which loads nothing itself (its server does)."""
    from pyspark.sql import SparkSession

    remote = remote or os.environ.get("SPARK_REMOTE") or None
    if remote is not None:
        if packages or conf:
            raise ConfigError(
                f"--packages and --conf do not apply to a Spark Connect session ({remote}): its "
                "server loads packages and holds the configuration (start it with --packages)"
            )
        try:
            return SparkSession.builder.remote(remote).getOrCreate()
        except Exception as exc:  # noqa: BLE001 - no server, or the Connect client's modules missing
            raise ConfigError(
                f"cannot connect to Spark at {remote}: {spark_error_text(exc)} "
                "(the client needs pip install 'cdc-emitter[connect]')"
            ) from exc
    # executors run this interpreter when the sink's Python data path is used
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from cdc_emitter.spark.setup import configure_spark

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if sys.stderr.isatty() else "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    builder = configure_spark(builder, packages)
    for key, value in reader_conf(fmt, packages, conf).items():
        builder = builder.config(key, value)
    try:
        with _jvm_output_to_stderr():
            spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - e.g. a package Maven Central does not have
        raise ConfigError(f"cannot start Spark: {spark_error_text(exc)}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def _jvm_output_to_stderr() -> Iterator[None]:
    """While a session starts, this process's standard output is its standard error: the JVM
    that PySpark launches inherits it, and what the JVM prints (Spark 3.5's Ivy prints
    ``:: loading settings ::`` when it resolves packages) must not mix into a command's output
    (``--json``). Python's own standard output is put back after."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def reader_conf(
    fmt: str | None, packages: Sequence[str], conf: Mapping[str, str] | None
) -> dict[str, str]:
    """Spark settings for reading ``fmt``: Delta's extension and catalog when its package is
    loaded (Delta refuses to read without them); the user's --conf wins."""
    out = dict(conf or {})
    if fmt == "delta" and any(c.startswith("io.delta:") for c in packages):
        for key, value in _DELTA_CONF.items():
            out.setdefault(key, value)
    return out
