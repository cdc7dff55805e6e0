"""Spark jobs the cluster tests run in their own process (a process holds one kind of Spark
session: the test session's local one, a standalone cluster's, or a Spark Connect client).

    python cluster_jobs.py standalone MASTER BOOTSTRAP TOPIC WORKDIR SPARK_LOCAL_COMMAND
    python cluster_jobs.py connect    SC_URL BOOTSTRAP TOPIC WORKDIR

Each writes the rows of ``rows()`` (column-mode times) to TOPIC and prints ``done``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

DDL = "k long, v string, t long, diff long"
#: The standalone job's files (part, rows): two batches above its ``small_batch_rows``, two below
#: (the sink picks a batch's way by the size of the batch before it).
PARTS = ((0, 60_000), (1, 60_000), (2, 20_000), (3, 20_000))
#: The Connect job's second topic (TOPIC + this): batches of one time by one sink.
ONE_TIME = "-one-time"
#: The suffix of the topic a batch with a bad row is refused for, through Connect.
REFUSED = "-refused"
ONE_TIME_ROWS = 3_000


def _spark_4() -> bool:
    import pyspark

    return int(pyspark.__version__.split(".")[0]) >= 4


SPARK_4 = _spark_4()


#: The Connect job's batch times on its second topic: distinct rows, then each row twice.
ONE_TIME_TIMES = (0, 1, 2)
#: The one of them whose rows each come twice.
ONE_TIME_REPEATED = 2


def one_time_rows(time: int) -> list[dict]:
    """The rows of the Connect job's batch of ``time`` on its second topic: distinct, but at
    :data:`ONE_TIME_REPEATED`, where each row comes twice (``ONE_TIME_ROWS`` updates of diff 2)."""
    distinct = [{"k": i, "v": f"v{time}-{i}", "t": 0, "diff": 1} for i in range(ONE_TIME_ROWS)]
    return distinct * 2 if time == ONE_TIME_REPEATED else distinct


def rows(part: int, n: int) -> list[dict]:
    """File ``part``'s rows: times 10*part .. 10*part+2, keys overlapping the previous part's."""
    return [
        {
            "k": (i * 7 + part) % (n // 2),
            "v": f"v{i % 13}",
            "t": 10 * part + i % 3,
            "diff": 1 if i % 5 else -1,
        }
        for i in range(n)
    ]


def add_file(directory: Path, part: int, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".part-{part}.json.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows(part, n)))
    tmp.rename(directory / f"part-{part:03d}.json")


def run_query(spark, source: Path, checkpoint: Path, function) -> None:
    query = (
        spark.readStream.schema(DDL)
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.option("checkpointLocation", str(checkpoint))
        .foreachBatch(function)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def standalone(master: str, bootstrap: str, topic: str, workdir: str, spark_local: str) -> None:
    """Executors whose Python does not exist (nothing of ours may run there). After the first
    batch the worker is lost and a new one registers (``spark-local restart-worker``); every
    executor is SIGKILLed while the second batch's updates are being written. The fourth batch
    follows a small one, so the driver finishes it from rows the (new) executors encoded."""
    from pyspark.sql import SparkSession

    from cdc_emitter import CdcSink, configure_spark
    from cdc_emitter.spark import kafka as spark_kafka

    spark = (
        configure_spark(SparkSession.builder.master(master).appName("cdc-emitter-standalone"))
        .config("spark.pyspark.python", "/nonexistent/executor-python")
        .config("spark.executor.memory", "1g")
        .config("spark.cores.max", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    source, checkpoint = Path(workdir) / "in", Path(workdir) / "checkpoint"
    for part, n in PARTS:
        add_file(source, part, n)
    sink = CdcSink(
        bootstrap,
        topic,
        checkpoint_location=str(checkpoint),
        time_column="t",
        small_batch_rows=50_000,
    )
    finished_on = []
    write = spark_kafka.write_messages
    killed = []

    def write_then_kill(*args, **kwargs):
        if not killed:  # the executors die while the first tasks write
            killed.append(
                threading.Timer(
                    0.3, subprocess.run, [f"{spark_local} kill-executors"], {"shell": True}
                )
            )
            killed[0].start()
        return write(*args, **kwargs)

    def batch(df, batch_id):
        if batch_id == 1:
            spark_kafka.write_messages = write_then_kill
        try:
            sink(df, batch_id)
        finally:
            spark_kafka.write_messages = write
        finished_on.append(sink.last_result.finished_on)
        if batch_id == 0:
            subprocess.run(f"{spark_local} restart-worker", shell=True, check=True)

    run_query(spark, source, checkpoint, batch)
    assert killed, "the executor kill never ran"
    # the first batch's messages (spread before its size was known) are few bytes: the driver
    # joins and produces them
    assert finished_on == ["driver", "executors", "executors", "driver"], finished_on
    killed[0].join()
    spark.stop()
    print("done")


def connect(url: str, bootstrap: str, topic: str, workdir: str) -> None:
    """Crash after a batch's write, restart from the checkpoint, a second query, then write()."""
    from pyspark.sql import SparkSession

    from cdc_emitter import CdcSink
    from cdc_emitter.sink import plan as sink_jvm
    from cdc_emitter.spark.settings import FALLBACK_THRESHOLD, GroupsInMemory

    spark = SparkSession.builder.remote(url).getOrCreate()
    source, checkpoint = Path(workdir) / "in", Path(workdir) / "checkpoint"
    marker = Path(workdir) / "crashed"
    for part in range(2):
        add_file(source, part, 2_000)
    sink = CdcSink(bootstrap, topic, checkpoint_location=str(checkpoint), time_column="t")

    def crash_once(df, batch_id, sink=sink, marker=str(marker)):
        sink(df, batch_id)
        if batch_id == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("simulated crash after the write, before the commit")

    try:
        run_query(spark, source, checkpoint, crash_once)
        raise AssertionError("the query did not crash")
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the simulated crash, through Spark Connect
        # Spark Connect 3.5 loses a foreachBatch function's error (the server reads EOF from its
        # Python worker; SPARK-44463, fixed in 4.0): there the marker shows the crash ran
        assert "simulated crash" in str(exc) or (not SPARK_4 and marker.exists()), exc
    add_file(source, 2, 2_000)
    run_query(spark, source, checkpoint, crash_once)  # batch 1 again, then batch 2
    other, other_checkpoint = Path(workdir) / "in2", Path(workdir) / "checkpoint2"
    add_file(other, 3, 2_000)
    second = CdcSink(bootstrap, topic, checkpoint_location=str(other_checkpoint), time_column="t")
    run_query(spark, other, other_checkpoint, second)
    final = spark.createDataFrame(rows(4, 2_000), DDL)
    # the executors' way through Connect, and the setting its packing raises (GroupsInMemory),
    # read, raised and put back through Connect's config requests
    CdcSink(bootstrap, topic, time_column="t", small_batch_rows=0).write(final)
    # a sink's batches of one time through Connect, each checked and packed by one job and
    # written by a second (the first on the spread guessed for it; the third, of repeated rows,
    # consolidated straight away, as the next batch of a layout that repeated rows is)
    one_time = CdcSink(bootstrap, topic + ONE_TIME, create_topic=True, small_batch_rows=0)
    finished_on = []
    for time_ in ONE_TIME_TIMES:
        batch = spark.createDataFrame(one_time_rows(time_), DDL).drop("t")
        if (
            time_ == ONE_TIME_REPEATED
        ):  # as the batch of a layout that repeated rows: consolidated straight away
            sink_jvm.note_repeats(batch.schema, ["k", "v"], True)
        written = one_time.write(batch, time=time_)
        assert written.updates == ONE_TIME_ROWS, written
        finished_on.append(written.finished_on)
    # small_batch_rows=0: no batch joined on the driver, the first's small messages included
    assert finished_on == ["executors"] * 3, finished_on
    # a bad row among local rows (on Connect a local relation, whose checks Spark's optimizer
    # may compute while it plans the batch's cache): the sink's own error, the setting put back
    from cdc_emitter.errors import BadInputError

    bad = spark.createDataFrame([(1, "a", 1, 1), (2, "b", None, 1)], DDL)
    refusing = CdcSink(
        bootstrap, topic + REFUSED, create_topic=True, time_column="t", small_batch_rows=0
    )
    try:
        refusing.write(bad)
        raise AssertionError("a row with a null time was written")
    except BadInputError as exc:
        assert str(exc).startswith(f"topic {topic + REFUSED!r}: null time in column 't'"), exc
    assert spark.conf.get(FALLBACK_THRESHOLD, None) is None
    held = GroupsInMemory(spark)
    held.at_least(520)
    assert spark.conf.get(FALLBACK_THRESHOLD) == "520"
    held.restore()
    assert spark.conf.get(FALLBACK_THRESHOLD, None) is None
    spark.stop()
    print("done")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    started = time.monotonic()
    {"standalone": standalone, "connect": connect}[sys.argv[1]](*sys.argv[2:])
    print(f"took {time.monotonic() - started:.1f}s", file=sys.stderr)
