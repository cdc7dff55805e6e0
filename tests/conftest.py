"""Shared fixtures: a real Kafka broker for integration tests, unique topics per test.

Where the broker comes from (first that works), decided once per session and only when a test
asks for ``kafka_bootstrap``:

1. ``KAFKA_BOOTSTRAP_SERVERS`` is set: that cluster.
2. A Docker engine answers: testcontainers' Kafka module.
3. ``scripts/kafka-local``: a broker that already runs in its default state dir is shared (and
   left running); otherwise this session starts its own in a private state dir (or in
   ``CDC_KAFKA_HOME`` if set) and stops it at the end. Under pytest-xdist (``-n 3``) the workers
   share that one broker: the controller makes its state dir, the first worker to need it starts
   it, the controller stops it after the last.

No broker at all is a test failure with an explanation, never a skip. Unit tests need none:
nothing here touches Kafka until a fixture is requested.

Tiers. Every test that needs a service — under ``tests/integration``, or asking for a broker,
schema-registry or Spark fixture, or a ``verify --engine spark`` run — is marked ``integration``
(and ``kafka`` / ``spark`` by what it asks for) at collection, so no test has to remember to.
``pytest --quick`` (``scripts/test --quick``) is the fast tier: it does not collect
``tests/integration``, deselects every ``integration`` and ``slow`` test, fails any test that
would still start a broker or Spark, and runs each Hypothesis property at most
``QUICK_MAX_EXAMPLES`` times (the same properties). The full run caps them at
``FULL_MAX_EXAMPLES``; the ``thorough`` profile (``HYPOTHESIS_PROFILE=thorough`` or
``--hypothesis-profile thorough``) keeps each test's own ``max_examples``
(up to 3,000: for a change to the reader).

Hypothesis runs under the ``cdc-emitter`` profile: no per-example deadline (on a shared 2-core
machine a deadline fails a test for its timing, not its property; a test's own ``deadline``
still applies). ``HYPOTHESIS_PROFILE`` picks another registered profile.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

hypothesis_settings.register_profile("cdc-emitter", deadline=None)
hypothesis_settings.register_profile("thorough", deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "cdc-emitter"))

ROOT = Path(__file__).resolve().parents[1]
KAFKA_LOCAL = ROOT / "scripts" / "kafka-local"

MARKERS = {
    "kafka": "needs a real Kafka broker",
    "spark": "needs a local Spark session",
    "slow": "takes more than a few seconds",
    "integration": "needs a service (broker, registry, Spark); not in the quick tier",
}

# Fixtures that start (or need) a service, by the marker they imply.
KAFKA_FIXTURES = frozenset(
    {
        "_kafka_broker",
        "kafka_bootstrap",
        "kafka_local",
        "secure_kafka",
        "proxied_kafka",
        "kafka_cluster",
        "topic_factory",
        "module_topic_factory",
        "make_topic",
    }
)
SPARK_FIXTURES = frozenset({"spark"})
SERVICE_FIXTURES = KAFKA_FIXTURES | SPARK_FIXTURES | {"schema_registry"}
SHARED_KAFKA_HOME = "CDC_TEST_XDIST_KAFKA_HOME"  # set by the xdist controller for its workers
INTEGRATION_DIR = ROOT / "tests" / "integration"
QUICK_MAX_EXAMPLES = 100  # Hypothesis's own default
# The whole suite runs each property at most this many times (about 25 s for the reader's
# properties on 2 cores, against 2 minutes at their own budgets of 1,000 to 3,000); the
# ``thorough`` profile (HYPOTHESIS_PROFILE=thorough) keeps each test's own budget.
FULL_MAX_EXAMPLES = 500
# Options of every Spark JVM the tests start (PySpark's driver, through spark-submit; a
# standalone cluster's master and worker) and of every kafka-local broker, unless
# SPARK_SUBMIT_OPTS / SPARK_DAEMON_JAVA_OPTS / CDC_KAFKA_JVM_OPTS are set: compile with C1 only,
# and only methods run four times as often as the JVM's default thresholds ask; collect garbage
# with one thread. The suite is bound by CPU, and most of a test JVM's went to compiling code
# for jobs of a few rows, which never run long enough to repay it (test_sink_small alone: 143
# CPU-s in the Spark JVM with the defaults, 78 with C1 only; the broker-restarting modules: 113
# CPU-s in their brokers, 61 with C1 only; test_apply, C1 only: 141 CPU-s, and 105 with the
# thresholds scaled by 4, 111 by 10).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CompileThresholdScaling=4 -XX:+UseSerialGC"
#: Spark settings of every Spark driver the tests start — the workers' sessions and the
#: subprocesses' of CLI commands and jobs — as system properties after `JVM_OPTIONS` in
#: ``SPARK_SUBMIT_OPTS`` (a driver's SparkConf takes each ``spark.*`` property). PySpark 4
#: records the Python call site of every Column made, for the text of a DataFrame error: about
#: ten round trips to the JVM per Column, where making it is one or two. The tests make
#: thousands of Columns a module, on tiny data (test_sink_small: 131 s with it, 94 s without;
#: test_sink: 193 s and 153 s). A failed job's error text differs only in the call site it
#: names under "== DataFrame ==" (a Java frame instead of the Python line), which neither the
#: tests nor cdc-emitter read (`spark_error_text` takes the first line). PySpark 3 has no such
#: setting.
TEST_SPARK_CONF = {"spark.python.sql.dataFrameDebugging.enabled": "false"}
#: The variables that carry `JVM_OPTIONS` to the JVMs above, with the class-data archive of
#: their kind (tests/jvm_archives.py) once a test that starts one is collected.
JVM_OPTION_VARIABLES = {
    "SPARK_SUBMIT_OPTS": "spark",
    "SPARK_DAEMON_JAVA_OPTS": "spark",
    "CDC_KAFKA_JVM_OPTS": "kafka",
}
#: The variables of `JVM_OPTION_VARIABLES` this session set (the others are the user's).
OWN_JVM_OPTIONS: set[str] = set()
#: Passes `OWN_JVM_OPTIONS` on to the xdist workers.
OWN_JVM_OPTIONS_LIST = "CDC_TEST_OWN_JVM_OPTIONS"
# How long a broker or registry may take to start (the scripts' default is 90 s): on a busy
# shared 2-core machine a JVM service takes longer, and a fixture that gives up fails every test.
SERVICE_START_TIMEOUT = "300"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("cdc-emitter").addoption(
        "--quick",
        action="store_true",
        default=False,
        help="the quick tier: no broker, no Spark (integration and slow tests deselected), "
        f"Hypothesis properties at most {QUICK_MAX_EXAMPLES} examples each",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    for name in JVM_OPTION_VARIABLES:  # inherited by every JVM
        if name not in os.environ:
            os.environ[name] = _jvm_options(name)
            OWN_JVM_OPTIONS.add(name)
    # an xdist worker inherits the controller's variables: the list says which were not the user's
    own = os.environ.get(OWN_JVM_OPTIONS_LIST)
    if own is None:
        os.environ[OWN_JVM_OPTIONS_LIST] = ",".join(sorted(OWN_JVM_OPTIONS))
    else:
        OWN_JVM_OPTIONS.update(name for name in own.split(",") if name in JVM_OPTION_VARIABLES)
    if _xdist_controller(config):  # workers inherit the variable: one broker for all of them
        os.environ[SHARED_KAFKA_HOME] = tempfile.mkdtemp(prefix="cdc-emitter-kafka-xdist-")


def pytest_unconfigure(config: pytest.Config) -> None:
    home = os.environ.get(SHARED_KAFKA_HOME)
    if _xdist_controller(config) and home:
        if os.path.exists(os.path.join(home, "kafka.pid")):
            KafkaLocal(home=home)._run("stop", check=False)
        shutil.rmtree(home, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(_start_lock(home))
        del os.environ[SHARED_KAFKA_HOME]


def _start_lock(shared_home: str) -> str:
    """The lock file of the shared broker's start (see `_Broker`): beside its state dir."""
    return shared_home.rstrip(os.sep) + ".start.lock"


def _xdist_controller(config: pytest.Config) -> bool:
    """True in the process that hands tests to pytest-xdist workers (``-n 3``). Use
    ``--dist loadfile`` with it: the module-scoped brokers, clusters and tables then start once
    per module (pytest-xdist 3.8's ``loadgroup`` does not group under pytest 9.2)."""
    return (
        not hasattr(config, "workerinput")
        and bool(getattr(config.option, "numprocesses", None))
        and getattr(config.option, "dist", "no") != "no"
        and not config.getoption("collectonly", default=False)
    )


def _quick(config: pytest.Config) -> bool:
    return bool(config.getoption("quick", default=False))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The quick tier does not even import the integration modules."""
    if _quick(config) and collection_path == INTEGRATION_DIR:
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects, so it sees these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if names & KAFKA_FIXTURES:
            item.add_marker(pytest.mark.kafka)
        if names & SPARK_FIXTURES or (callspec and callspec.params.get("engine") == "spark"):
            item.add_marker(pytest.mark.spark)
        if (
            names & SERVICE_FIXTURES
            or INTEGRATION_DIR in item.path.parents
            or item.get_closest_marker("kafka")
            or item.get_closest_marker("spark")
        ):
            item.add_marker(pytest.mark.integration)
    if _quick(config):

        def out(item: pytest.Item) -> bool:
            return bool(item.get_closest_marker("integration") or item.get_closest_marker("slow"))

        dropped = [item for item in items if out(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not out(item)]
        _cap_examples(items, QUICK_MAX_EXAMPLES)
    elif "thorough" not in (
        config.getoption("hypothesis_profile", None),
        os.environ.get("HYPOTHESIS_PROFILE"),
    ):
        _cap_examples(items, FULL_MAX_EXAMPLES)
    if _xdist_distributes(config):
        _slow_modules_first(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """After deselection: a process that will run a test that starts a JVM maps the archives."""
    config = session.config
    if (
        _xdist_controller(config)
        or config.getoption("collectonly", default=False)
        or not any(item.get_closest_marker("integration") for item in session.items)
    ):
        return
    _map_class_archives()


def _map_class_archives() -> None:
    """Give the JVMs this process starts (and its subprocesses') the class-data archive of
    their kind, made first if needed (`make_archives`)."""
    from jvm_archives import make_archives

    kinds = {JVM_OPTION_VARIABLES[name] for name in OWN_JVM_OPTIONS}
    options = make_archives(sorted(kinds), JVM_OPTIONS)
    for name in OWN_JVM_OPTIONS:
        if options.get(JVM_OPTION_VARIABLES[name]):
            os.environ[name] = f"{_jvm_options(name)} {options[JVM_OPTION_VARIABLES[name]]}"


def _jvm_options(variable: str) -> str:
    """What the tests put in the JVM options ``variable``: `JVM_OPTIONS`, and for Spark's JVMs
    `TEST_SPARK_CONF` as system properties (the daemons' too, which ignore them: a cluster's
    executors get its drivers' options when the two are alike, see test_spark_cluster.py)."""
    if JVM_OPTION_VARIABLES[variable] != "spark":
        return JVM_OPTIONS
    return " ".join([JVM_OPTIONS, *(f"-D{key}={value}" for key, value in TEST_SPARK_CONF.items())])


def _xdist_distributes(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker, or in its controller, when tests are handed out."""
    return hasattr(config, "workerinput") or _xdist_controller(config)


def _slow_modules_first(items: list[pytest.Item]) -> None:
    """Modules marked ``slow`` as a whole first, then the others by their number of tests.

    Under ``--dist loadfile`` a module is one unit of work, handed out in this order (the run
    passes ``--no-loadscope-reorder``). Each slow module is one costly scenario (a job in a JVM
    of its own, a cluster, broker faults: 20 to 215 s each); handed out first, the other worker
    fills in around them, instead of one of them running alone at the end. Every worker sorts
    alike: the order depends on the collection only."""
    sizes: dict[pytest.Module | None, int] = {}
    for item in items:
        module = item.getparent(pytest.Module)
        sizes[module] = sizes.get(module, 0) + 1

    def key(item: pytest.Item) -> tuple[bool, int]:
        module = item.getparent(pytest.Module)
        slow = module is not None and any(m.name == "slow" for m in module.own_markers)
        return (not slow, -sizes[module])

    # stable: modules of one key keep their collection order, a module's tests theirs
    items.sort(key=key)


def _cap_examples(items: list[pytest.Item], cap: int) -> None:
    """Each Hypothesis property among ``items`` runs at most ``cap`` examples."""
    for item in items:
        test = getattr(item, "obj", None)
        if getattr(test, "is_hypothesis_test", False):
            own = test._hypothesis_internal_use_settings  # what the test's @settings says
            if own.max_examples > cap:
                test._hypothesis_internal_use_settings = hypothesis_settings(own, max_examples=cap)


def refuse_in_quick_tier(request: pytest.FixtureRequest, what: str) -> None:
    """A test in the quick tier that reaches a service fixture anyway (e.g. through
    ``getfixturevalue``) fails, rather than starting ``what``."""
    if _quick(request.config):
        pytest.fail(
            f"{request.node.nodeid} starts {what}, which the quick tier (--quick) never does: "
            "it needs the integration marker (see tests/conftest.py)",
            pytrace=False,
        )


# --- broker discovery ---------------------------------------------------------------------------


def docker_available(timeout: float = 1.0) -> bool:
    """True when a Docker engine answers ``GET /_ping`` within ``timeout`` seconds."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            path = host[len("unix://") :]
            if not os.path.exists(path):
                return False
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(path)
        elif host.startswith("tcp://"):
            hostport = host[len("tcp://") :].rstrip("/")
            name, _, port = hostport.rpartition(":")
            sock = socket.create_connection((name, int(port)), timeout=timeout)
        else:
            return False
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256)
    except (OSError, ValueError):
        return False


class KafkaLocal:
    """Control of a broker run by ``scripts/kafka-local`` (one state dir = one broker).

    ``stop_broker()`` / ``start_broker()`` keep its data and port, so clients see the same
    broker come back, as after a real broker restart.
    """

    def __init__(self, home: str | None = None) -> None:
        self.env = dict(os.environ)
        self.env.setdefault("CDC_KAFKA_START_TIMEOUT", SERVICE_START_TIMEOUT)
        if home is not None:
            self.env["CDC_KAFKA_HOME"] = home
        self.bootstrap_servers: str | None = None
        self.started_here = False

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(KAFKA_LOCAL), *args], env=self.env, capture_output=True, text=True, timeout=600
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"scripts/kafka-local {' '.join(args)} failed (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()}"
            )
        return proc

    def running(self) -> bool:
        return self._run("status", check=False).returncode == 0

    def start(self, *options: str) -> str:
        """Start (or find) the broker; returns its address. Remembers whether we started it."""
        was_running = self.running()
        address = self._run("start", *options).stdout.strip().splitlines()[-1]
        self.started_here = self.started_here or not was_running
        self.bootstrap_servers = address
        return address

    def stop(self) -> None:
        """Stop the broker and remove its data."""
        self._run("stop")

    def stop_broker(self) -> None:
        """Stop the broker, keeping data and port for :meth:`start_broker`."""
        self._run("stop", "--keep-data")

    def start_broker(self) -> str:
        """Start the broker stopped by :meth:`stop_broker`, on the same port with the same data."""
        address = self._run("start").stdout.strip().splitlines()[-1]
        if self.bootstrap_servers is not None and address != self.bootstrap_servers:
            raise RuntimeError(f"broker came back at {address}, not {self.bootstrap_servers}")
        self.bootstrap_servers = address
        return address

    def restart_broker(self) -> str:
        self.stop_broker()
        return self.start_broker()


class _Broker:
    def __init__(self, shared_home: str | None = None) -> None:
        self.shared_home = shared_home  # an xdist worker's: the state dir all workers share
        self.bootstrap_servers: str | None = None
        self.source = ""
        self.local: KafkaLocal | None = None
        self.container = None
        self.failure: str | None = None

    def get(self) -> str:
        if self.bootstrap_servers is None and self.failure is None:
            self._acquire()
        if self.failure is not None:
            pytest.fail(self.failure, pytrace=False)
        assert self.bootstrap_servers is not None
        return self.bootstrap_servers

    def _acquire(self) -> None:
        env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
        if env:
            self.bootstrap_servers, self.source = env, "KAFKA_BOOTSTRAP_SERVERS"
            return
        notes = []
        if docker_available():
            try:
                from testcontainers.kafka import KafkaContainer  # lazy: only with Docker

                image = os.environ.get("CDC_KAFKA_IMAGE", "confluentinc/cp-kafka:7.6.1")
                container = KafkaContainer(image).with_kraft()
                container.start()
                self.container = container
                self.bootstrap_servers, self.source = (
                    container.get_bootstrap_server(),
                    "testcontainers",
                )
                return
            except Exception as exc:  # noqa: BLE001 - fall back to the local broker
                notes.append(f"testcontainers Kafka failed: {exc!r}")
        else:
            notes.append("no Docker engine answered")
        # A kafka-local broker that already runs (e.g. started by hand) is shared and left running.
        # Otherwise this session starts its own in a private state dir (unless CDC_KAFKA_HOME
        # names one), so parallel sessions and broker-restart tests never disturb each other.
        # Under pytest-xdist the workers share one broker in the state dir the controller made
        # (started by the first worker to need it, stopped by the controller after the last).
        local = KafkaLocal()
        try:
            if not local.running() and not os.environ.get("CDC_KAFKA_HOME"):
                if self.shared_home:
                    local = KafkaLocal(home=self.shared_home)
                    # one worker starts it, the others find it; the lock is beside the state dir,
                    # not in it: a start that formats the dir removes it first, and a lock file
                    # removed while held is no lock for the next worker (with three workers, two
                    # formatted the dir at once and every Kafka test failed)
                    with open(_start_lock(self.shared_home), "w") as lock:
                        fcntl.flock(lock, fcntl.LOCK_EX)
                        self.bootstrap_servers = local.start()
                    local.started_here = False  # the controller stops it
                else:
                    local = KafkaLocal(home=tempfile.mkdtemp(prefix="cdc-emitter-kafka-"))
                    self.bootstrap_servers = local.start()
            else:
                self.bootstrap_servers = local.start()
            self.local, self.source = local, "scripts/kafka-local"
        except Exception as exc:  # noqa: BLE001
            notes.append(str(exc))
            if local.env.get("CDC_KAFKA_HOME", "").startswith(tempfile.gettempdir()):
                local._run("stop", check=False)  # clean up the private state dir
            self.failure = (
                "integration tests need a real Kafka broker and none could be had:\n"
                "  KAFKA_BOOTSTRAP_SERVERS is not set;\n  "
                + "\n  ".join(notes)
                + "\nSet KAFKA_BOOTSTRAP_SERVERS, start Docker, or fix scripts/kafka-local "
                "(needs Java 17+ and Maven with access to Maven Central)."
            )

    def close(self) -> None:
        if self.container is not None:
            try:
                self.container.stop()
            except Exception:  # noqa: BLE001
                pass
        if self.local is not None and self.local.started_here:
            self.local.stop()


@pytest.fixture(scope="session")
def _kafka_broker(request: pytest.FixtureRequest):
    refuse_in_quick_tier(request, "a Kafka broker")
    worker = hasattr(request.config, "workerinput")
    broker = _Broker(os.environ.get(SHARED_KAFKA_HOME) if worker else None)
    yield broker
    broker.close()


@pytest.fixture(scope="session")
def kafka_bootstrap(_kafka_broker: _Broker) -> str:
    """``HOST:PORT`` of a real Kafka broker for this session (see the module docstring)."""
    address = _kafka_broker.get()
    print(f"\nKafka broker for this session: {address} ({_kafka_broker.source})", file=sys.stderr)
    return address


@pytest.fixture(scope="session")
def kafka_local(_kafka_broker: _Broker):
    """A :class:`KafkaLocal` whose broker tests may stop and start (same port, same data).

    It is the session's broker when this session started it with scripts/kafka-local; otherwise
    (external cluster, testcontainers, or a kafka-local broker someone else started) a private
    kafka-local broker is started for these tests and stopped at the end. Use
    ``kafka_local.bootstrap_servers`` as its address.
    """
    if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() and not docker_available():
        _kafka_broker.get()  # the session broker will be (or is) a kafka-local one
    if _kafka_broker.local is not None and _kafka_broker.local.started_here:
        yield _kafka_broker.local
        return
    home = tempfile.mkdtemp(prefix="cdc-emitter-kafka-restart-")
    local = KafkaLocal(home=home)
    try:
        local.start()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(
            f"cannot start a private kafka-local broker for restart tests: {exc}", pytrace=False
        )
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def secure_kafka(request: pytest.FixtureRequest):
    """A second kafka-local broker speaking SASL/SCRAM-SHA-512 over TLS (its own CA), started
    once for the module that uses it (one module: once per session), stopped after it, so it
    does not idle through the rest of the session: ``(bootstrap_servers, client settings)`` — the settings a client needs
    (security.protocol, sasl.*, ssl.ca.location), read from the broker's client.properties."""
    refuse_in_quick_tier(request, "a secure Kafka broker")
    home = tempfile.mkdtemp(prefix="cdc-emitter-kafka-secure-")
    local = KafkaLocal(home=home)
    try:
        address = local.start("--secure")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"cannot start the secure kafka-local broker: {exc}", pytrace=False)
    try:
        with open(os.path.join(home, "client.properties"), encoding="utf-8") as fh:
            settings = dict(line.strip().split("=", 1) for line in fh if "=" in line)
        yield address, settings
    finally:
        local.stop()


@pytest.fixture(scope="session")
def schema_registry(request: pytest.FixtureRequest):
    """A real schema registry (Apicurio Registry's Confluent-compatible API, behind basic
    credentials) from ``scripts/schema-registry-local``, started once per session:
    ``(url, client settings)`` — the settings hold ``basic.auth.user.info``."""
    refuse_in_quick_tier(request, "a schema registry")
    home = tempfile.mkdtemp(prefix="cdc-emitter-registry-")
    script = str(ROOT / "scripts" / "schema-registry-local")
    env = {**os.environ, "CDC_REGISTRY_HOME": home}
    env.setdefault("CDC_REGISTRY_START_TIMEOUT", SERVICE_START_TIMEOUT)
    proc = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(
            f"cannot start scripts/schema-registry-local (exit {proc.returncode}):\n{proc.stderr[-3000:]}",
            pytrace=False,
        )
    try:
        with open(os.path.join(home, "client.properties"), encoding="utf-8") as fh:
            settings = dict(line.strip().split("=", 1) for line in fh if "=" in line)
        yield proc.stdout.strip().splitlines()[-1], settings
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def proxied_kafka(request: pytest.FixtureRequest):
    """A third kafka-local broker that advertises the port of a :class:`faultproxy.FaultProxy`
    in front of it, so every client connection goes through the proxy: ``(bootstrap, proxy)``.
    Started once for the module that uses it, like :func:`secure_kafka`."""
    refuse_in_quick_tier(request, "a proxied Kafka broker")
    from faultproxy import FaultProxy, wait_port

    home = tempfile.mkdtemp(prefix="cdc-emitter-kafka-proxied-")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        broker_port = probe.getsockname()[1]
    proxy = FaultProxy(broker_port)
    local = KafkaLocal(home=home)
    local.env.update(CDC_KAFKA_PORT=str(broker_port), CDC_KAFKA_ADVERTISED_PORT=str(proxy.port))
    try:
        local.start()
        wait_port(proxy.port)
    except Exception as exc:  # noqa: BLE001
        proxy.close()
        pytest.fail(f"cannot start the proxied kafka-local broker: {exc}", pytrace=False)
    try:
        yield f"127.0.0.1:{proxy.port}", proxy
    finally:
        proxy.close()
        local.stop()


class KafkaCluster:
    """``scripts/kafka-local start --brokers 3`` in a state dir of its own; nodes stop and start
    one by one (same ports, same data)."""

    def __init__(self) -> None:
        self.local = KafkaLocal(home=tempfile.mkdtemp(prefix="cdc-emitter-kafka-cluster-"))
        self.bootstrap_servers = ""

    def start(self) -> str:
        self.bootstrap_servers = (
            self.local._run("start", "--brokers", "3").stdout.strip().splitlines()[-1]
        )
        return self.bootstrap_servers

    def stop_node(self, node: int, *more: int) -> None:
        """Stop ``node`` and ``more`` (keeping their data), all at once: two nodes stopped one
        after the other take a controlled shutdown each, in turn."""
        self._each("stop-node", (node, *more))

    def start_node(self, node: int, *more: int) -> None:
        """Start ``node`` and ``more`` again (same ports, same data), all at once."""
        self._each("start-node", (node, *more))

    def _each(self, command: str, nodes: tuple[int, ...]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            for done in [pool.submit(self.local._run, command, str(node)) for node in nodes]:
                done.result()  # the first failure raises, naming its command

    def stop(self) -> None:
        self.local._run("stop", check=False)


@pytest.fixture(scope="module")
def kafka_cluster(request: pytest.FixtureRequest):
    """A 3-node KRaft cluster on loopback (replication 3, min.insync.replicas 2), started once
    for the module that uses it, like :func:`secure_kafka` (three idle brokers cost the rest of
    the session CPU: replica fetchers and controller heartbeats)."""
    refuse_in_quick_tier(request, "a 3-node Kafka cluster")
    cluster = KafkaCluster()
    try:
        cluster.start()
    except Exception as exc:  # noqa: BLE001
        cluster.stop()
        pytest.fail(f"cannot start the 3-node kafka-local cluster: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


# --- topics ------------------------------------------------------------------------------------


def _admin(bootstrap_servers: str, **settings: object):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap_servers, **settings})


def _wait_for_topic(admin, topic: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic=topic, timeout=5)
        tmd = md.topics.get(topic)
        if (
            tmd is not None
            and tmd.error is None
            and tmd.partitions
            and all(p.leader >= 0 for p in tmd.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic!r} did not become available within {timeout}s")
        time.sleep(0.1)


def _topics(request: pytest.FixtureRequest, kafka_bootstrap: str):
    created: list[tuple[str, str]] = []
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:120] or "test"

    def make(partitions: int = 1, *, config=None, bootstrap_servers: str | None = None) -> str:
        from confluent_kafka.admin import NewTopic

        servers = bootstrap_servers or kafka_bootstrap
        name = f"{base}-{uuid.uuid4().hex[:10]}"
        admin = _admin(servers)
        topic = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=1,
            config={k: str(v) for k, v in (config or {}).items()},
        )
        admin.create_topics([topic], operation_timeout=15)[name].result(timeout=30)
        created.append((servers, name))
        _wait_for_topic(admin, name)
        return name

    yield make
    for servers in dict.fromkeys(servers for servers, _ in created):
        _delete_later(servers, [name for s, name in created if s == servers])


#: Topic deletions under way, each with the client that sent it; a client is dropped once its
#: deletion is done (dropped before, it would never send it).
_deleting: list = []


def _delete_later(bootstrap_servers: str, topics: list[str]) -> None:
    """Asks the broker to delete ``topics`` and returns at once. Best effort: a topic left behind
    is harmless (names are unique), and waiting for the deletion cost each test about 40 ms, and
    now and then 5 s."""
    _deleting[:] = [(client, f) for client, f in _deleting if not f.done()]
    # log_level 0: a client still waiting when its broker is stopped keeps quiet on stderr
    client = _admin(bootstrap_servers, log_level=0)
    for future in client.delete_topics(topics, operation_timeout=5).values():
        _deleting.append((client, future))


@pytest.fixture
def topic_factory(request: pytest.FixtureRequest, kafka_bootstrap: str):
    """``make(partitions=1, *, config=None, bootstrap_servers=None) -> topic name``.

    Each call creates a new topic named after the test plus a uuid (replication 1, optional
    topic ``config`` such as ``{"max.message.bytes": "2000"}``); all are deleted afterwards
    (best effort).
    """
    yield from _topics(request, kafka_bootstrap)


@pytest.fixture(scope="module")
def module_topic_factory(request: pytest.FixtureRequest, kafka_bootstrap: str):
    """:func:`topic_factory` for a module-scoped fixture: topics named after the module, deleted
    after its last test."""
    yield from _topics(request, kafka_bootstrap)


@pytest.fixture
def make_topic(topic_factory):
    """Alias of :func:`topic_factory`."""
    return topic_factory
