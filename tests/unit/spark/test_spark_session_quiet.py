"""A quiet Spark start: the JVM that spark_session launches writes to a log file, not to this
process's terminal; Python's own output is put back; a failure names the log. No JVM is
launched: a child process stands in for it (it inherits the descriptors as the JVM would)."""

from __future__ import annotations

import glob
import logging
import os
import subprocess
import sys
import tempfile

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from cdc_emitter.errors import ConfigError
from cdc_emitter.spark import session as session_module
from cdc_emitter.spark.session import log_cause, spark_session

IVY_LOG = (
    ":: loading settings :: url = jar:file:/opt/ivysettings.xml\n"
    ":: resolving dependencies :: org.apache.spark#spark-submit-parent;1.0\n"
    "\tHost repos.spark-packages.org not found. url=https://repos.spark-packages.org/x.pom\n"
    "\t\t:: org.example#nope_2.13;0.0.1: not found\n"
    'Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: '
    "org.example#nope_2.13;0.0.1: not found]\n"
    "\tat org.apache.spark.util.MavenUtils$.resolveMavenCoordinates(MavenUtils.scala:539)\n"
)


def jvm_like_child(out: str = "ivy says hello\n", err: str = "WARN NativeCodeLoader\n") -> None:
    """A child process writing to the standard output and error it inherited, as the JVM does."""
    code = f"import os; os.write(1, {out.encode()!r}); os.write(2, {err.encode()!r})"
    subprocess.run([sys.executable, "-c", code], check=True)


class FakeSession:
    def __init__(self) -> None:
        self.levels: list[str] = []
        self.sparkContext = self

    def setLogLevel(self, level: str) -> None:  # noqa: N802 - PySpark's name
        self.levels.append(level)


class FakeBuilder:
    """Stands in for ``SparkSession.builder``: getOrCreate runs ``start``."""

    def __init__(self, start) -> None:
        self._options: dict[str, str] = {}
        self.start = start

    def appName(self, name: str) -> FakeBuilder:  # noqa: N802 - PySpark's name
        return self.config("spark.app.name", name)

    def config(self, key: str, value: str) -> FakeBuilder:
        self._options[key] = value
        return self

    def getOrCreate(self):  # noqa: N802 - PySpark's name
        return self.start(self)


@pytest.fixture
def logs(tmp_path, monkeypatch):
    """The temporary directory (where the JVM's log goes) is ``tmp_path``; no JVM runs yet."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(SparkContext, "_gateway", None)
    for var in ("PYSPARK_GATEWAY_PORT", "SPARK_REMOTE"):
        monkeypatch.delenv(var, raising=False)
    return lambda: sorted(glob.glob(str(tmp_path / "cdc-emitter-spark-*.log")))


@pytest.fixture
def builder():
    """Install a FakeBuilder; the class's own ``builder`` (a class property) is put back."""
    original = SparkSession.__dict__["builder"]
    fakes: list[FakeBuilder] = []

    def install(start) -> FakeBuilder:
        fakes.append(FakeBuilder(start))
        SparkSession.builder = fakes[-1]  # type: ignore[misc]
        return fakes[-1]

    yield install
    SparkSession.builder = original  # type: ignore[misc]


def test_fds_to_sends_a_child_s_output_to_the_file_and_puts_python_s_back(tmp_path, capfd):
    log = tmp_path / "jvm.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    try:
        with session_module._fds_to(fd):
            jvm_like_child()
    finally:
        os.close(fd)
    print("python's own output")
    sys.stderr.write("python's own error\n")
    captured = capfd.readouterr()
    assert "ivy says hello" not in captured.out + captured.err
    assert "WARN NativeCodeLoader" not in captured.out + captured.err
    assert captured.out == "python's own output\n"
    assert captured.err == "python's own error\n"
    assert log.read_text() == "ivy says hello\nWARN NativeCodeLoader\n"


def test_a_ctrl_c_while_the_descriptors_are_put_back_waits_until_both_are(tmp_path, capfd):
    """SIGINT that arrives amid the restore is held until stdout and stderr are both back, so a
    Ctrl-C never leaves the terminal's stderr on the log."""
    import signal

    log = tmp_path / "jvm.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    restored = []
    real_dup2 = os.dup2

    def dup2_then_ctrl_c(src: int, dst: int) -> int:
        result = real_dup2(src, dst)
        if src != fd:  # putting a descriptor back: a Ctrl-C right after the first one
            restored.append(dst)
            if len(restored) == 1:
                os.kill(os.getpid(), signal.SIGINT)
        return result

    try:
        with pytest.raises(KeyboardInterrupt):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(session_module.os, "dup2", dup2_then_ctrl_c)
                with session_module._fds_to(fd):
                    pass
    finally:
        os.close(fd)
    assert restored == [1, 2]  # the interrupt came after both were put back
    sys.stderr.write("back on the terminal\n")
    assert capfd.readouterr().err == "back on the terminal\n"
    assert log.read_text() == ""


def test_a_quiet_start_says_nothing(logs, builder, capfd):
    def start(fake):
        jvm_like_child()
        logging.getLogger("py4j.clientserver").warning("py4j warns during the start")
        return FakeSession()

    fake = builder(start)
    spark = spark_session("test")
    assert spark.levels == ["ERROR"]
    assert fake._options["spark.ui.showConsoleProgress"] == "false"
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""
    (log,) = logs()
    assert "ivy says hello" in open(log).read()
    assert logging.getLogger("py4j").level == logging.NOTSET  # put back
    print("after")
    assert capfd.readouterr().out == "after\n"


def test_a_failed_quiet_start_names_the_log_and_the_jvm_s_cause(logs, builder, capfd):
    def start(fake):
        jvm_like_child(out="", err=IVY_LOG)
        raise RuntimeError(
            "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number."
        )

    builder(start)
    with pytest.raises(ConfigError) as info:
        spark_session("test", ["org.example:nope_2.13:0.0.1"])
    (log,) = logs()
    assert str(info.value) == (
        "cannot start Spark: the JVM exited: java.lang.RuntimeException: [unresolved "
        f"dependency: org.example#nope_2.13;0.0.1: not found] (Spark's log: {log})"
    )
    assert capfd.readouterr().err == ""


def test_verbose_starts_as_before(logs, builder, capfd):
    builder(lambda fake: (jvm_like_child(), FakeSession())[1])
    spark_session("test", verbose=True)
    captured = capfd.readouterr()
    assert captured.out == ""  # the JVM's standard output goes to standard error
    assert captured.err == "ivy says hello\nWARN NativeCodeLoader\n"
    assert logs() == []


def test_a_running_jvm_is_not_redirected(logs, builder, monkeypatch, capfd):
    monkeypatch.setattr(SparkContext, "_gateway", object())
    builder(lambda fake: (jvm_like_child(), FakeSession())[1])
    spark_session("test")
    assert "ivy says hello" in capfd.readouterr().err
    assert logs() == []


def test_log_cause(tmp_path):
    (tmp_path / "a.log").write_text(IVY_LOG)
    assert log_cause(str(tmp_path / "a.log")) == (
        "java.lang.RuntimeException: [unresolved dependency: org.example#nope_2.13;0.0.1: "
        "not found]"
    )
    (tmp_path / "b.log").write_text("Error: Missing application resource.\nUsage: ...\n")
    assert log_cause(str(tmp_path / "b.log")) == "Missing application resource."
    (tmp_path / "c.log").write_text("nothing to see\n")
    assert log_cause(str(tmp_path / "c.log")) is None
    assert log_cause(str(tmp_path / "missing.log")) is None
