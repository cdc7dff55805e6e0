"""Many writers, one history (issue 55): writers race, pause, die and come back on one topic, and
every reader, whatever order it reads the messages in, finds one history — exactly the batches
whose sink call returned.

Each writer is a process of its own (`jobs/writer_job.py`: one local Spark session serving many
batches over stdin/stdout), so that it can be paused (SIGSTOP) and killed (SIGKILL) like a real
driver, its Spark JVM with it (each writer is a process group of its own). The writers the
selected tests use (`USES`) start once for the module, all at once: ``a`` and ``b`` serve every
scenario (each command names its topic), ``victim`` is killed in the restart scenario (e), and
scenario (d) kills ``b`` (a later test asking for ``b`` would get a new one). Scenario (d) kills
its writer at a moment chosen by timing (``KILL_AFTER`` into its second batch).

The checks every scenario ends with (`check_history`): a ``read_committed`` reader that follows
the protocol (the verifier's `CdcReader`, strict) finds no violation, reaches the frontier the
returned batches claimed, and reports exactly the updates of the batches whose sink call returned
(at the times their intervals gave them); the same when it reads the messages shuffled, with a
third of them duplicated (several seeds). A batch that failed did so with `ConcurrentWriterError`
and left nothing a reader sees.

The pause between a batch's claim and its updates is the writer job's
(``CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM=<seconds>``: the job wraps the sink's claim commit to sleep
that long after it; set for one batch from the command's ``pause_after_claim``, or in
``victim``'s environment). The tests that stop or kill a writer mid-batch wait for its claim to
become visible to a ``read_committed`` reader (topics of two partitions: claims go to partition
0, updates to partition 1) and stop or kill it then: between its claim and its updates. A batch
whose updates were visible with or before its claim fails `claim_came_first`.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import read_committed_history, topic_ends, wait_settled, watermark

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().parent / "jobs" / "writer_job.py"
PAUSE_ENV = "CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM"
#: What declares two writers identical ("redundant": same input, same batches); a CdcSink that does
#: not take it yet runs without it, and the test fails at its end saying so.
REDUNDANT = {"redundant": True}
SPARK_START_TIMEOUT = 300.0  # three JVMs starting at once on a busy 2-core machine
BATCH_TIMEOUT = 120.0
#: How long a writer sleeps between its claim and its updates in the pause/kill scenarios: long
#: enough to see its claim and stop it there.
PAUSE = 8.0
#: Scenario (d) kills the victim this long after it started its second batch (timing-based).
KILL_AFTER = 1.0
SEEDS = (1, 2, 3)
MAX_LONG = 2**63 - 1


# --- writer processes ------------------------------------------------------------------------


class WriterProcess:
    """One `jobs/writer_job.py` process (a process group: the Python driver and its Spark JVM)."""

    def __init__(self, name: str, bootstrap: str, log_dir: Path, env: dict | None = None) -> None:
        self.name = name
        self.log_path = log_dir / f"writer-{name}-{int(time.time() * 1000)}.log"
        environ = {**os.environ, **(env or {})}
        environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p
        )
        environ.setdefault("PYSPARK_PYTHON", sys.executable)
        environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        self._log = open(self.log_path, "w", encoding="utf-8")  # closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, str(JOB), bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            env=environ,
            cwd=str(ROOT),
            start_new_session=True,  # its own process group: signals reach the JVM too
        )
        self.answers: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        self.stopped = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.answers.put(json.loads(line))
            except ValueError:
                self.answers.put({"unparsed": line})
        self.answers.put({"exited": True})

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def where(self) -> str:
        return f"writer {self.name} (log {self.log_path}):\n{self.log_tail()}"

    def next_answer(self, timeout: float) -> dict | None:
        """The next answer within ``timeout`` seconds, or None."""
        try:
            answer = self.answers.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None
        self.seen.append(answer)
        if answer.get("exited"):
            raise AssertionError(
                f"writer {self.name} exited (code {self.proc.poll()}); {self.where()}"
            )
        return answer

    def expect(self, what: str, timeout: float) -> dict:
        """The next answer that has ``what`` (``"ready"``, ``"start"``, ``"ok"``)."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self.next_answer(deadline - time.monotonic())
            if answer is None:
                raise AssertionError(f"no {what!r} answer within {timeout:g}s from {self.where()}")
            if what in answer:
                return answer

    def send(self, **command) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def write(self, timeout: float = BATCH_TIMEOUT, **command) -> dict:
        """Send one batch and wait for its outcome."""
        self.send(**command)
        return self.expect("ok", timeout)

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)  # the group this process leads (start_new_session)

    def stop(self) -> None:
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def cont(self) -> None:
        self.signal(signal.SIGCONT)
        self.stopped = False

    def kill(self) -> None:
        if self.alive():
            self.signal(signal.SIGKILL)
        self.proc.wait(timeout=60)
        self._kill_group()

    def _kill_group(self) -> None:
        try:  # what is left of the group (the JVM, if the driver died first)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        if self.stopped:
            self.cont()
        if self.alive():
            try:
                self.send(op="exit")
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                self.kill()
        self._kill_group()
        self._log.close()


class Writers:
    """The module's writer processes, by name; a dead one is replaced when asked for. ``envs``:
    the environment each name starts with."""

    def __init__(self, bootstrap: str, log_dir: Path, envs: dict | None = None) -> None:
        self.bootstrap, self.log_dir, self.envs = bootstrap, log_dir, envs or {}
        self.procs: dict[str, WriterProcess] = {}
        self.ready: set[str] = set()

    def start(self, name: str) -> WriterProcess:
        old = self.procs.pop(name, None)
        if old is not None:
            old.close()
        self.ready.discard(name)
        self.procs[name] = WriterProcess(name, self.bootstrap, self.log_dir, self.envs.get(name))
        return self.procs[name]

    def __getitem__(self, name: str) -> WriterProcess:
        proc = self.procs.get(name)
        if proc is None or not proc.alive():
            proc = self.start(name)
        if name not in self.ready:
            proc.expect("ready", SPARK_START_TIMEOUT)
            self.ready.add(name)
        return proc

    def close(self) -> None:
        for proc in self.procs.values():
            proc.close()


#: Which writers each test asks for: those of the tests selected start at once, with the module.
USES = {
    "test_two_writers_with_different_rows_at_once_leave_one_history": ("a", "b"),
    "test_a_writer_paused_mid_batch_writes_only_inside_its_own_interval": ("a", "b"),
    "test_two_identical_writers_at_once_both_succeed": ("a", "b"),
    "test_one_of_two_identical_writers_killed_the_other_completes_everything": ("a", "b"),
    "test_a_writer_killed_between_claim_and_updates_completes_its_batch_on_restart": (
        "a",
        "victim",
    ),
}


@pytest.fixture(scope="module")
def writers(request, kafka_bootstrap, tmp_path_factory):
    envs = {"victim": {PAUSE_ENV: str(PAUSE)}}
    pool = Writers(kafka_bootstrap, tmp_path_factory.mktemp("writers"), envs)
    selected = {
        item.originalname for item in request.session.items if item.module is request.module
    }
    try:
        for name in ("a", "b", "victim"):  # Spark starts in each at once (one JVM each)
            if name == "a" or any(name in USES.get(test, ()) for test in selected):
                pool.start(name)
        yield pool
    finally:
        pool.close()


# --- batches and the history they must make --------------------------------------------------


def rows_for(writer: str, batch: int, base: int) -> list[list]:
    """Batch ``batch`` of a writer's input: three new keys at times ``10 * batch + i``, and (after
    the first batch) the retraction of the first key of the batch before."""
    rows = [[base + 3 * batch + i, writer, 10 * batch + i, 1] for i in range(3)]
    if batch:
        rows.append([base + 3 * (batch - 1), writer, 10 * batch, -1])
    return rows


def expected_updates(rows: list[list], lower: int) -> list[tuple]:
    """The updates a batch makes of its rows, its interval starting at ``lower`` (a late row,
    with ``late="advance"``, moves to ``lower``)."""
    return [((k, v), max(t, lower), d) for k, v, t, d in rows]


def consolidated(updates) -> Counter:
    sums: Counter = Counter()
    for data, t, d in updates:
        sums[(data, t)] += d
    return Counter({(data, t, d): 1 for (data, t), d in sums.items() if d})


def check_history(bootstrap: str, topic: str, batches: dict, outcomes: list, writers=()) -> None:
    """The topic holds exactly the batches whose sink call returned, unambiguously.

    ``batches``: ``{logical batch: rows}``; identical writers share logical batches.
    ``outcomes``: ``[(logical batch, answer)]`` of every sink call.
    """
    where = "\n".join(f"{key}: {answer}" for key, answer in outcomes)
    logs = "\n".join(w.where() for w in writers)
    for key, answer in outcomes:
        assert answer["ok"] or answer["error"] == "ConcurrentWriterError", (
            f"batch {key} failed with something else than ConcurrentWriterError:\n{where}\n{logs}"
        )
    intervals: dict = {}
    for key, answer in outcomes:
        if answer["ok"]:
            interval = (answer["lower"], answer["upper"])
            assert intervals.setdefault(key, interval) == interval, (
                f"identical writers wrote batch {key} at other intervals:\n{where}"
            )
    claimed = sorted(intervals.values())
    for (_, upper), (lower, _) in zip(claimed, claimed[1:]):
        assert upper is not None and upper <= lower, f"overlapping intervals {claimed}:\n{where}"
    expected = consolidated(
        u for key, (lower, _) in intervals.items() for u in expected_updates(batches[key], lower)
    )
    end = (max(upper for _, upper in claimed),) if claimed else (0,)

    # every sink call has returned, but the last transactions' commit markers may still be on
    # their way (Kafka may write them after the commit returns): read once they landed
    assert wait_settled(bootstrap, topic, timeout=30), (
        f"an open transaction holds back read_committed readers of {topic!r}: committed ends "
        f"{topic_ends(bootstrap, topic)}, high watermarks "
        f"{topic_ends(bootstrap, topic, committed=False)}"
    )
    frontier, collection, violations = read_committed_history(bootstrap, topic)
    assert violations == [], f"violations in {topic!r}:\n{violations}\nsink calls:\n{where}"
    assert frontier == end, f"the reader stopped at {frontier}, the batches claimed up to {end}"
    missing, extra = expected - collection, collection - expected
    assert collection == expected, (
        f"the history is not the returned batches': missing {sorted(missing)}, not from a "
        f"returned batch {sorted(extra)}\nsink calls:\n{where}"
    )
    for seed in SEEDS:  # the same history in any order, with duplicates
        shuffled = read_committed_history(bootstrap, topic, shuffle_seed=seed, duplicate=True)
        assert shuffled == (frontier, collection, []), (
            f"{topic!r} read shuffled (seed {seed}) gives another history: frontier "
            f"{shuffled[0]}, violations {shuffled[2]}, missing "
            f"{sorted(collection - shuffled[1])}, extra {sorted(shuffled[1] - collection)}"
        )


def no_ignored_options(outcomes: list) -> None:
    ignored = sorted({o for _, answer in outcomes for o in answer.get("ignored", ())})
    assert not ignored, f"CdcSink does not take {ignored} (the test ran without them)"


def first_visible(bootstrap: str, topic: str, before: dict, writer: WriterProcess) -> set:
    """Wait until a partition of ``topic`` holds more committed messages than ``before`` (the
    writer's first messages became visible to a ``read_committed`` reader): return those
    partitions. Fails if the writer's batch returned first (nothing left to stop or kill)."""
    from confluent_kafka import Consumer

    from cdc_emitter.kafka.config import consumer_config

    consumer = Consumer(consumer_config(bootstrap, {"isolation.level": "read_committed"}))

    def moved() -> set:
        return {p for p, end in before.items() if watermark(consumer, topic, p) > end}

    try:
        deadline = time.monotonic() + BATCH_TIMEOUT
        while time.monotonic() < deadline:
            seen = moved()
            if seen:
                return seen
            answer = writer.next_answer(0.02)
            if answer is not None and "ok" in answer:
                raise AssertionError(
                    f"writer {writer.name} finished its batch ({answer}) before it could be "
                    f"stopped mid-batch (partitions {sorted(moved())} had moved): no pause "
                    f"between its claim and its updates ({PAUSE_ENV})?"
                )
    finally:
        consumer.close()
    raise AssertionError(
        f"nothing of writer {writer.name}'s batch became visible; {writer.where()}"
    )


def claim_came_first(moved: set) -> None:
    assert moved == {0}, (
        f"the batch's first visible messages were in partitions {sorted(moved)}: its claim "
        "(partition 0) must be committed before any of its updates (partition 1)"
    )


# --- (a) two writers, different rows, at once ------------------------------------------------


def test_two_writers_with_different_rows_at_once_leave_one_history(
    writers, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(2)
    a, b = writers["a"], writers["b"]
    batches, sent = {}, []
    for name, proc, base in (("a", a, 1000), ("b", b, 2000)):
        for batch in range(5):
            batches[(name, batch)] = rows_for(name, batch, base)
            proc.send(
                topic=topic,
                batch=batch,
                rows=batches[(name, batch)],
                writer_id=f"{name}-{topic}",
                checkpoint=str(tmp_path / name),
                late="advance",  # the other writer may have claimed this batch's times
            )
            sent.append(((name, batch), proc))
    outcomes = [(key, proc.expect("ok", BATCH_TIMEOUT)) for key, proc in sent]
    check_history(kafka_bootstrap, topic, batches, outcomes, (a, b))
    assert any(answer["ok"] for _, answer in outcomes)


# --- (b) a writer paused between its claim and its updates -----------------------------------


def test_a_writer_paused_mid_batch_writes_only_inside_its_own_interval(
    writers, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(2)
    x, y = writers["a"], writers["b"]
    common = dict(topic=topic, late="advance")
    batches = {("x", 0): rows_for("x", 0, 1000), ("x", 1): rows_for("x", 1, 1000)}
    before = topic_ends(kafka_bootstrap, topic)
    x.send(
        **common,
        batch=0,
        rows=batches[("x", 0)],
        writer_id="x",
        checkpoint=str(tmp_path / "x"),
        pause_after_claim=PAUSE,
    )
    x.expect("start", BATCH_TIMEOUT)
    moved = first_visible(kafka_bootstrap, topic, before, x)
    x.stop()
    try:
        outcomes = []
        for batch in range(3):  # the other writer goes on meanwhile
            batches[("y", batch)] = rows_for("y", batch, 2000)
            answer = y.write(
                **common,
                batch=batch,
                rows=batches[("y", batch)],
                writer_id="y",
                checkpoint=str(tmp_path / "y"),
            )
            outcomes.append((("y", batch), answer))
    finally:
        x.cont()
    outcomes.append((("x", 0), x.expect("ok", BATCH_TIMEOUT)))
    # and the paused writer goes on with its next batch
    answer = x.write(
        **common, batch=1, rows=batches[("x", 1)], writer_id="x", checkpoint=str(tmp_path / "x")
    )
    outcomes.append((("x", 1), answer))
    check_history(kafka_bootstrap, topic, batches, outcomes, (x, y))
    claim_came_first(moved)


# --- (c) two identical writers at once -------------------------------------------------------


def test_two_identical_writers_at_once_both_succeed(
    writers, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(2)
    a, b = writers["a"], writers["b"]
    batches = {batch: rows_for("same", batch, 3000) for batch in range(4)}
    sent = []
    for name, proc in (("a", a), ("b", b)):
        for batch, rows in batches.items():
            proc.send(
                topic=topic,
                batch=batch,
                rows=rows,
                writer_id=f"replica-{name}",
                checkpoint=str(tmp_path / name),
                sink_options=REDUNDANT,
            )
            sent.append((batch, proc))
    outcomes = [(batch, proc.expect("ok", BATCH_TIMEOUT)) for batch, proc in sent]
    assert all(answer["ok"] for _, answer in outcomes), "\n".join(map(str, outcomes))
    check_history(kafka_bootstrap, topic, batches, outcomes, (a, b))
    no_ignored_options(outcomes)


# --- (d) one of two identical writers killed, never restarted --------------------------------


def test_one_of_two_identical_writers_killed_the_other_completes_everything(
    writers, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(2)
    survivor, victim = writers["a"], writers["b"]
    batches = {batch: rows_for("same", batch, 4000) for batch in range(4)}

    def command(name: str, batch: int) -> dict:
        return dict(
            topic=topic,
            batch=batch,
            rows=batches[batch],
            writer_id=f"replica-{name}",
            checkpoint=str(tmp_path / name),
            sink_options=REDUNDANT,
        )

    survivor.send(**command("survivor", 0))
    victim.send(**command("victim", 0))
    outcomes = [(0, survivor.expect("ok", BATCH_TIMEOUT)), (0, victim.expect("ok", BATCH_TIMEOUT))]
    victim.send(**command("victim", 1))
    for batch in (1, 2, 3):
        survivor.send(**command("survivor", batch))
    victim.expect("start", BATCH_TIMEOUT)
    time.sleep(KILL_AFTER)
    victim.kill()  # mid-batch 1 (timing-based), and never restarted
    outcomes += [(batch, survivor.expect("ok", BATCH_TIMEOUT)) for batch in (1, 2, 3)]
    assert all(answer["ok"] for _, answer in outcomes), "\n".join(map(str, outcomes))
    # readers never stall: no transaction of the dead writer holds the committed end back
    # (check_history waits up to 30 s for that, and fails naming the offsets)
    check_history(kafka_bootstrap, topic, batches, outcomes, (survivor,))
    no_ignored_options(outcomes)


# --- (e) killed between its claim and its updates, restarted from its checkpoint --------------


def test_a_writer_killed_between_claim_and_updates_completes_its_batch_on_restart(
    writers, kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(2)
    victim, restarted = writers["victim"], writers["a"]
    batches = {batch: rows_for("r", batch, 5000) for batch in range(2)}
    common = dict(topic=topic, writer_id="restartable", checkpoint=str(tmp_path / "checkpoint"))
    # batch 0 by the query's driver in one process; then it runs on in another (the victim,
    # started with the pause in its environment), which dies between its claim and its updates
    first = restarted.write(**common, batch=0, rows=batches[0], fresh=True)
    assert first["ok"], first
    before = topic_ends(kafka_bootstrap, topic)
    victim.send(**common, batch=1, rows=batches[1])
    victim.expect("start", BATCH_TIMEOUT)
    moved = first_visible(kafka_bootstrap, topic, before, victim)
    victim.kill()
    # the query restarts from its checkpoint and runs the same batch again
    again = restarted.write(**common, batch=1, rows=batches[1], fresh=True)
    assert again["ok"], again
    assert again["lower"] == first["upper"], (first, again)
    check_history(kafka_bootstrap, topic, batches, [(0, first), (1, again)], (restarted,))
    claim_came_first(moved)


# --- (f) guards: refused before anything is written ------------------------------------------


def test_a_topic_of_other_messages_is_refused_before_anything_is_written(
    writers, kafka_bootstrap, topic_factory
):
    from confluent_kafka import Producer

    topic = topic_factory(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(3):
        producer.produce(topic, value=b"hello", partition=0)
    assert producer.flush(30) == 0
    before = topic_ends(kafka_bootstrap, topic, committed=False)
    answer = writers["a"].write(
        topic=topic, call="write", rows=[[1, "x", 0, 1]], writer_id="guard-foreign"
    )
    assert not answer["ok"] and answer["cdc_error"], answer
    assert topic_ends(kafka_bootstrap, topic, committed=False) == before


def test_a_batch_at_the_largest_time_is_refused_before_anything_is_written(
    writers, kafka_bootstrap, topic_factory
):
    topic = topic_factory(2)
    before = topic_ends(kafka_bootstrap, topic, committed=False)
    answer = writers["a"].write(
        topic=topic, batch=0, rows=[[1, "x", MAX_LONG, 1]], writer_id="guard-max-time"
    )
    assert not answer["ok"] and "BadInputError" in answer["errors"], answer
    assert topic_ends(kafka_bootstrap, topic, committed=False) == before
