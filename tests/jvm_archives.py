"""Class-data archives (Java's AppCDS) for the JVMs the test suite starts.

Every Spark driver and Kafka broker the suite starts loads and verifies the same ten thousand
classes from the same jars. Java 17 can save them, once parsed and verified, in an archive that
later JVMs map instead (``-XX:ArchiveClassesAtExit`` writes one when a JVM exits,
``-XX:SharedArchiveFile`` uses it). Measured on this project's 2-core machine: a Spark session's
start and first query took 13.9 CPU-s without, 8.3 with; a broker's start 6.1 CPU-s without,
3.6 with, and it answered in 2.7 s instead of 5.5.

`archive_options` makes each archive once, with a short run of a JVM of that kind (a Spark session
running a few queries; a broker taking a few transactional writes), under a lock, then keeps it
in the user's cache (``$XDG_CACHE_HOME/cdc-emitter/jvm-archives``, beside kafka-local's jars) for
later runs. Its name carries a digest of the Java version, the JVM options and the jars (names,
sizes, times), so another Java, PySpark or Kafka makes a new one. Java checks the jars again
when it maps one; an archive it cannot use is ignored, silently (``-Xlog:cds*=off``), and the
JVM loads its classes as it would without one. Making an archive that fails never fails the run:
the JVMs start without it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: ``CDC_TEST_JVM_ARCHIVES=0`` starts every JVM without an archive (to measure what they save).
SWITCH = "CDC_TEST_JVM_ARCHIVES"
#: Silences Java's warning when an archive does not fit a JVM (another class path): that JVM
#: starts as it would without one, and its output stays what the tests compare.
QUIET = "-Xlog:cds*=off"

#: A Spark session's start and a query with a shuffle: the classes every Spark JVM of the suite
#: loads from Spark's own jars. (A training run that also ran a Python UDF, Parquet and a
#: streaming query took 50 s instead of about 15, for no measurable gain on a test's session.)
_SPARK_TRAINING = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    proc = spark.sparkContext._gateway.proc
    spark.range(100).selectExpr("id % 3 AS g").groupBy("g").count().orderBy("g").collect()
    spark.stop()
    proc.stdin.close()  # the JVM exits when its input closes, and writes the archive then
    sys.exit(proc.wait(timeout=300))
    """
)

#: A broker taking a topic, a transactional write and a read: the classes of its request paths.
_KAFKA_TRAINING = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    servers = sys.argv[1]
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic("warm", 1, 1)])["warm"].result(60)
    producer = Producer({"bootstrap.servers": servers, "transactional.id": "warm"})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("warm", b"x")
    producer.commit_transaction(60)
    consumer = Consumer({
        "bootstrap.servers": servers, "group.id": "warm", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    consumer.subscribe(["warm"])
    consumer.consume(1, 30)
    consumer.close()
    """
)


def make_archives(kinds: list[str], jvm_options: str) -> dict[str, str]:
    """`archive_options` of each of ``kinds``, by kind: the archives made side by side (two
    training JVMs on two cores) where this machine has none yet. No Kafka archive when the
    tests' broker is ``KAFKA_BOOTSTRAP_SERVERS``'s: the tests start none."""
    from concurrent.futures import ThreadPoolExecutor

    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        kinds = [kind for kind in kinds if kind != "kafka"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(kinds, pool.map(lambda k: archive_options(k, jvm_options), kinds)))


def archive_options(kind: str, jvm_options: str) -> str:
    """The JVM options that map the archive of ``kind`` (``"spark"`` or ``"kafka"``), made first
    if this machine has none yet; ``""`` when it cannot be made or archives are switched off."""
    if os.environ.get(SWITCH, "1") == "0":
        return ""
    java = _java()
    if java is None:
        return ""
    folder = cache_root() / "jvm-archives"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        jars = _spark_jars() if kind == "spark" else _kafka_jars()
        if not jars:
            return ""
        archive = folder / f"{kind}-{_digest(java, jvm_options, jars)}.jsa"
        failed = archive.with_suffix(".failed")
        with open(folder / f"{kind}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one maker; the other process waits and reuses it
            if not archive.exists() and not failed.exists():
                _prune(folder, kind)
                try:
                    _make(kind, archive, jvm_options)
                except Exception:
                    failed.write_text("")  # not tried again until Java, the jars or options change
                    raise
    except Exception as exc:  # an archive only saves time: never a reason to fail the run
        print(
            f"jvm archives: no {kind} archive ({_reason(exc)}); its JVMs start without one",
            file=sys.stderr,
        )
        return ""
    if not archive.exists():
        return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def _prune(folder: Path, kind: str) -> None:
    """Remove the archives of ``kind`` made for another Java, other jars or other options, and
    what runs that were killed while making one left."""
    for old in folder.glob(f"{kind}-*"):
        old.unlink(missing_ok=True)


def _make(kind: str, archive: Path, jvm_options: str) -> None:
    """Run the training JVM of ``kind`` with ``ArchiveClassesAtExit``; keep what it wrote."""
    started = time.monotonic()
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    dump = f"{jvm_options} -XX:ArchiveClassesAtExit={partial} {QUIET}"
    try:
        _train(kind, dump)
        if not partial.exists():
            raise OSError(f"the {kind} JVM wrote no archive")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    print(
        f"jvm archives: made {archive.name} in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )


def _train(kind: str, dump: str) -> None:
    with tempfile.TemporaryDirectory(prefix=f"cdc-emitter-{kind}-archive-") as work:
        if kind == "spark":
            env = {**os.environ, "SPARK_SUBMIT_OPTS": dump, "PYSPARK_PYTHON": sys.executable}
            subprocess.run(
                [sys.executable, "-c", _SPARK_TRAINING],
                env=env,
                cwd=work,
                capture_output=True,
                timeout=600,
                check=True,
            )
        else:
            _make_kafka(dump, work)


def _reason(exc: BaseException) -> str:
    """The last line a failed training run wrote, or the error itself, cut short."""
    if isinstance(exc, subprocess.CalledProcessError):
        output = exc.stderr or exc.stdout or b""
        text = output.decode(errors="replace") if isinstance(output, bytes) else output
        lines = [line for line in text.splitlines() if line.strip()]
        reason = f"exit {exc.returncode}: {lines[-1] if lines else 'no output'}"
    else:
        reason = str(exc)
    return reason if len(reason) <= 200 else reason[:197] + "..."


def _make_kafka(dump: str, work: str) -> None:
    env = {**os.environ, "CDC_KAFKA_HOME": work, "CDC_KAFKA_JVM_OPTS": dump}
    script = str(ROOT / "scripts" / "kafka-local")
    started = subprocess.run(
        [script, "start"], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    # the storage tool that formatted the broker's data wrote one first: only the broker's counts
    partial = Path(dump.split("-XX:ArchiveClassesAtExit=", 1)[1].split()[0])
    partial.unlink(missing_ok=True)
    try:
        subprocess.run(
            [sys.executable, "-c", _KAFKA_TRAINING, started.stdout.strip().splitlines()[-1]],
            capture_output=True,
            timeout=300,
            check=True,
        )
    finally:  # TERM: the broker shuts down in order and writes the archive as it exits
        stopped = subprocess.run(
            [script, "stop"], env=env, capture_output=True, text=True, timeout=120
        )
    if "KILL" in stopped.stderr:  # killed: what it wrote, if anything, may be cut short
        partial.unlink(missing_ok=True)


def cache_root() -> Path:
    """cdc-emitter's folder in the user's cache: kafka-local's jars, these archives, the tests'
    lock on Spark's package cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cdc-emitter"


def _java() -> str | None:
    """The ``java`` that Spark's launcher and kafka-local pick: ``$JAVA_HOME/bin/java``, else
    the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def _spark_jars() -> list[Path]:
    import pyspark

    return sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def _kafka_jars() -> list[Path]:
    """kafka-local's jars (fetched by ``kafka-local fetch`` into its cache)."""
    subprocess.run(
        [str(ROOT / "scripts" / "kafka-local"), "fetch"],
        capture_output=True,
        timeout=900,
        check=True,
    )
    version = _kafka_version()
    cache = os.environ.get("CDC_KAFKA_CACHE") or str(cache_root() / f"kafka-{version}")
    return sorted(Path(cache, "libs").glob("*.jar"))


def _kafka_version() -> str:
    """The version kafka-local starts (``CDC_KAFKA_VERSION``, else its default)."""
    if os.environ.get("CDC_KAFKA_VERSION"):
        return os.environ["CDC_KAFKA_VERSION"]
    for line in (ROOT / "scripts" / "kafka-local").read_text().splitlines():
        if line.startswith('KAFKA_VERSION="${CDC_KAFKA_VERSION:-'):
            return line.split(":-", 1)[1].split("}", 1)[0]
    raise OSError("cannot find kafka-local's default Kafka version")


def _digest(java: str, jvm_options: str, jars: list[Path]) -> str:
    """What the archive depends on: the Java build, the options, the jars."""
    version = subprocess.run(
        [java, "-version"], capture_output=True, text=True, timeout=60, check=True
    ).stderr
    h = hashlib.sha256(f"{java}\n{version}\n{jvm_options}\n".encode())
    for jar in jars:
        stat = jar.stat()
        h.update(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def main() -> int:
    """Make the archives the test suite's JVMs will map: ``scripts/test`` runs this in the
    background before a whole-suite run, while ruff, mypy and the docs build keep one core busy,
    so the archives cost the run the other core's idle time instead of a pause of every xdist
    worker. The kinds are those `conftest` makes for a run with integration tests: none whose
    JVM options the user set."""
    from conftest import JVM_OPTION_VARIABLES, JVM_OPTIONS

    kinds = {kind for name, kind in JVM_OPTION_VARIABLES.items() if name not in os.environ}
    make_archives(sorted(kinds), JVM_OPTIONS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
