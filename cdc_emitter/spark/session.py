"""Spark sessions for the CLI's Spark-backed commands (``export``, ``schema``, ``convert``).

Guarantees:
  * a session that fails to start raises `ConfigError` whose first
    line is Spark's own cause (the Java exception behind a Py4J error);
  * the session's executors run the interpreter this process runs (the sink encodes there);
  * a JVM that `spark_session` launches prints nothing on this process's terminal unless
    ``verbose``: its standard output and error (Ivy's resolution log, Spark's warnings) go to a
    log file, which a failure to start names; this process's own output is untouched.

Imports PySpark only when a session is made: the CLI's commands that need no Spark start fast.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from cdc_emitter.errors import ConfigError
from cdc_emitter.spark.errors import spark_error_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DELTA_PACKAGES", "delta_package", "log_cause", "reader_conf", "spark_session"]

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
    *,
    verbose: bool = False,
) -> SparkSession:
    """A Spark session for a CLI command.

    Args:
        app: The application's name.
        packages: Maven coordinates to load besides the sink's (`configure_spark`).
        conf: Spark settings (``--conf``); they win over the ones set here.
        fmt: The format the command reads: ``delta`` adds Delta's extension and catalog when
            its package is loaded (`reader_conf`).
        remote: A Spark Connect server (``sc://host:port``; default ``$SPARK_REMOTE``): a
            Connect session instead, which loads nothing itself (its server does).
        verbose: Let the JVM print on this process's standard error as it starts and runs
            (Ivy's resolution log, Spark's warnings, the console progress bar). Otherwise a JVM
            launched here writes its standard output and error to a log file in the temporary
            directory (``cdc-emitter-spark-*.log``, kept), and PySpark's and Py4J's Python
            warnings during the start are silenced. A process whose JVM already runs (a
            session made before) uses that session as it is.

    Returns:
        The session (an existing one when there is: ``getOrCreate``).

    Raises:
        ConfigError: ``packages`` or ``conf`` with a Connect session; the session cannot be
            made: Spark's cause, and when quiet, `` (Spark's log: FILE)`` at the end.
    """
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

    progress = verbose and sys.stderr.isatty()  # quiet, the JVM's standard error is the log
    builder = (
        SparkSession.builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if progress else "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    builder = configure_spark(builder, packages)
    for key, value in reader_conf(fmt, packages, conf).items():
        builder = builder.config(key, value)
    launches = _launches_jvm()
    log = None if verbose or not launches else _new_log()
    try:
        if log is None:
            with _jvm_output_to_stderr():
                spark = builder.getOrCreate()
        else:
            with _fds_to(log[0]), _quiet_loggers():
                spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - e.g. a package Maven Central does not have
        raise ConfigError(_start_failure(exc, log[1] if log else None)) from exc
    finally:
        if log is not None:
            os.close(log[0])
    spark.sparkContext.setLogLevel("ERROR")
    if launches and fmt == "delta":
        sc = spark.sparkContext
        given = {key for key, _value in sc.getConf().getAll()}
        for key, value in local_delta_conf(sc.master, given, sc.defaultParallelism).items():
            spark.conf.set(key, value)
    return spark


#: Delta rebuilds a table's state from its log with this many tasks (Delta's default: 50).
DELTA_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def local_delta_conf(master: str, given: Collection[str], cores: int) -> dict[str, str]:
    """Settings for Delta in a session this process made on a local master, where the user set
    none of them: the table state rebuilt with one task per core rather than Delta's 50, which
    made each ``apply`` batch take 8 s instead of 3 s on 2 cores. A cluster's session, or a
    setting given (``--conf``, ``spark-defaults.conf``), is left as it is."""
    if not master.startswith("local") or DELTA_SNAPSHOT_PARTITIONS in given:
        return {}
    return {DELTA_SNAPSHOT_PARTITIONS: str(max(1, cores))}


#: The Python loggers silenced while a quiet session starts.
_QUIET_LOGGERS = ("py4j", "pyspark")


def _launches_jvm() -> bool:
    """Whether making a classic session launches a JVM: none runs for this process yet (PySpark
    launches one per process, on the first session) nor was one given (``spark-submit``)."""
    from pyspark import SparkContext

    return (
        getattr(SparkContext, "_gateway", None) is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    )


def _new_log() -> tuple[int, str] | None:
    """A new log file for the JVM (its descriptor and path), or None when none can be made."""
    try:
        return tempfile.mkstemp(prefix="cdc-emitter-spark-", suffix=".log")
    except OSError:
        return None


@contextlib.contextmanager
def _fds_to(target: int, fds: Sequence[int] = (1, 2)) -> Iterator[None]:
    """While inside, the file descriptors ``fds`` (standard output and error) are copies of
    ``target``: a child process started meanwhile (the JVM) inherits them, and keeps writing
    there after. Python's buffered output is flushed before and after, then ``fds`` are put
    back; a descriptor that is not open is left alone."""
    _flush()
    saved: list[tuple[int, int]] = []
    try:
        for fd in fds:
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:
                continue
        with _signals_held():
            for fd, _copy in saved:
                os.dup2(target, fd)
        yield
    finally:
        _flush()
        with _signals_held():  # a Ctrl-C amid the loop would leave stderr on the log
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back while inside, and raised again on leaving, so that their
    handlers never run between two steps that belong together.

    Python runs signal handlers in the main thread whichever thread the kernel picked (Spark's
    threads are running by then), so the handlers themselves are swapped for ones that only
    note the signal. Outside the main thread nothing can be swapped, nor is needed: handlers
    never run there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda n, _f: caught.append(n)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for number in dict.fromkeys(caught):
            signal.raise_signal(number)  # the real handler runs now, once per signal


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe
            pass


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """While inside, the `_QUIET_LOGGERS` log errors only (their levels put back after)."""
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        if logger.getEffectiveLevel() < logging.ERROR:
            logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _start_failure(exc: BaseException, log: str | None) -> str:
    """The message of a session that did not start: Spark's cause — the JVM's own last words in
    ``log`` when PySpark only says that it exited — and the log file."""
    text = spark_error_text(exc)
    if log is None:
        return f"cannot start Spark: {text}"
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
        cause = log_cause(log)
        if cause is not None:
            text = f"the JVM exited: {cause}"
    return f"cannot start Spark: {text} (Spark's log: {log})"


#: Lines of a JVM's output that say why it exited, best first.
_LOG_CAUSES = (
    re.compile(r'^Exception in thread "main" (.+)$'),
    re.compile(r"^Error: (.+)$"),
    re.compile(r"^(.*JAVA_HOME is not set.*)$"),
    re.compile(r"^(Error: Could not (?:find|create) .+)$"),
)


def log_cause(path: str, limit: int = 65536) -> str | None:
    """Why a JVM that exited did, by the last ``limit`` bytes of its output in ``path``.

    Args:
        path: The JVM's log (standard output and error).
        limit: How much of the end of the log to read.

    Returns:
        The first line that says (``java.lang.RuntimeException: [unresolved dependency:
        ...]`` of ``Exception in thread "main" ...``, spark-submit's ``Error: ...``), cut to 300
        characters; None when the log is unreadable or says nothing of the kind.
    """
    try:
        with open(path, "rb") as fh:
            fh.seek(max(os.fstat(fh.fileno()).st_size - limit, 0))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for pattern in _LOG_CAUSES:
        for line in lines:
            match = pattern.match(line.strip())
            if match:
                cause = match.group(1).strip()
                return cause if len(cause) <= 300 else cause[:297] + "..."
    return None


@contextlib.contextmanager
def _jvm_output_to_stderr() -> Iterator[None]:
    """While a session starts, this process's standard output is its standard error: the JVM
    that PySpark launches inherits it, and what the JVM prints (Spark 3.5's Ivy prints
    ``:: loading settings ::`` when it resolves packages) must not mix into a command's output
    (``--json``). Python's own standard output is put back after."""
    with _fds_to(2, fds=(1,)):
        yield


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
