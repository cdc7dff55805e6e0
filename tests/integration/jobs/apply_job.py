"""``cdc-emitter apply`` and `apply_topic` in their own process (Delta needs its package and
session extension when the session starts; the test session has neither).

    python apply_job.py BOOTSTRAP TOPIC OTHER_TOPIC ROUND_TRIP_TOPIC WORKDIR

Writes the topic by hand in three rounds (duplicated, reordered and re-batched messages, a time
left open until the next round) and after each round applies it to ``WORKDIR/table``:

1. ``cdc-emitter apply --once`` (through click's ``CliRunner``, in this session);
2. a batch function that crashes right after its Delta commit (before Spark commits the batch;
   on PySpark 3.5, in a `read_cdc_stream` loop), then `apply_topic`: what was committed is not
   committed again;
3. the checkpoint deleted, then ``apply --once`` again: the whole topic is read again, and only
   the new times are applied;
4. the same topic kept as copies of rows (``multiplicity="rows"``) in another table, and through
   the command line in a catalog table; then OTHER_TOPIC, whose collection holds a row -1 times,
   which copies cannot hold;
5. ``examples/round_trip.py`` in this session: Spark → CdcSink → Kafka → cdcv2 → Delta with a
   crash at every step, each Delta version compared with the source table by time travel.

Prints one JSON line: each Delta version's rows and recorded time, the updates written (to
compute the collection at each time), and each command's exit code and output.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

DATA = {
    "type": "record",
    "name": "data",
    "fields": [{"name": "k", "type": "long"}, {"name": "v", "type": ["null", "string"]}],
}


def main(bootstrap: str, topic: str, other_topic: str, round_trip_topic: str, workdir: str) -> None:
    import pyspark
    from click.testing import CliRunner

    from cdc_emitter.cli import main as cli
    from cdc_emitter.kafka.producer import CdcProducer
    from cdc_emitter.protocol import Progress, Update
    from cdc_emitter.protocol.codec import CdcCodec
    from cdc_emitter.protocol.headers import HEADER_KIND, HEADER_SCHEMA
    from cdc_emitter.read.apply import apply_changes, apply_topic
    from cdc_emitter.read.cdc_stream import read_cdc_stream
    from cdc_emitter.spark.session import delta_package, spark_session
    from cdc_emitter.spark.setup import sink_packages

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the integration tests' helpers
    from helpers import DELTA_TEST_CONF

    spark = spark_session(
        "apply-job",
        [delta_package(pyspark.__version__), *sink_packages()],
        {
            "spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.warehouse.dir": str(Path(workdir) / "warehouse"),
            **DELTA_TEST_CONF,
        },
        "delta",
    )
    codec = CdcCodec(DATA)
    headers = [(HEADER_KIND, b"progress"), (HEADER_SCHEMA, json.dumps(DATA).encode())]
    written: list = []

    def produce(messages, to: str = topic) -> None:
        with CdcProducer(bootstrap, to) as producer:
            for message in messages:
                if isinstance(message, Progress):
                    producer.produce(codec.encode_progress(message), headers=headers, partition=0)
                else:
                    if to == topic:
                        written.extend(message)
                    for value in codec.encode_updates(message):
                        producer.produce(value, partition=0)

    table = str(Path(workdir) / "table")
    args = ["apply", "--bootstrap-servers", bootstrap, "--topic", topic, "--to", table, "--once"]
    commands = []

    def command(*more: str) -> None:
        done = CliRunner().invoke(cli, [*args, *more], prog_name="cdc-emitter")
        commands.append({"exit": done.exit_code, "stdout": done.stdout, "stderr": done.stderr})

    a1, b1 = Update((1, "a"), 1, 1), Update((2, "b"), 1, 2)
    produce([[a1], [b1, a1], Progress((0,), (2,), ((1, 2),)), [Update((3, None), 2, 1)]])
    command()  # round 1: time 1 (time 2's statement is not written yet)
    produce(
        [
            [Update((1, "a"), 3, -1), Update((3, None), 2, 1)],
            Progress((2,), (4,), ((2, 1), (3, 2))),  # time 3 misses one update: open
            [Update((1, "a"), 3, -1)],
        ]
    )
    commits_before_crash = len(spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect())
    crashed = []

    def crash_after_commit(df, batch_id):
        result = apply_changes(df, table, topic)
        if not crashed:
            crashed.append(result.time)
            raise RuntimeError("simulated crash after the Delta commit")

    checkpoint = str(Path(table) / "_cdc_emitter_checkpoint")
    streaming = hasattr(spark, "dataSource")  # PySpark 4: the cdcv2 source; 3.5: the driver
    try:
        if streaming:
            query = (
                spark.readStream.format("cdcv2")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", topic)
                .load()
                .writeStream.foreachBatch(crash_after_commit)
                .option("checkpointLocation", checkpoint)
                .start()
            )
            try:
                query.processAllAvailable()
            finally:
                query.stop()
        else:
            for batch in read_cdc_stream(spark, bootstrap, topic, start=2, once=True):
                crash_after_commit(batch.df, None)
        crash = "no crash"
    except Exception as exc:  # noqa: BLE001 - the simulated crash
        crash = "simulated crash" if "simulated crash" in str(exc) else str(exc)[-500:]
    redo = apply_topic(spark, bootstrap, topic, table, checkpoint)  # the crashed batch again
    # round 3: time 3's last update, a repeated batch and statement, times 4 (empty) and 5
    produce([[Update((2, "b"), 3, 1)], Progress((4,), (6,), ((5, 1),)), [Update((4, "d"), 5, 1)]])
    produce([[Update((2, "b"), 3, 1)], Progress((2,), (4,), ((2, 1), (3, 2)))])
    shutil.rmtree(checkpoint, ignore_errors=True)  # PySpark 3.5 makes none
    command("--json")  # read from the start again: only times 3 and 5 are new
    command()  # nothing new
    # the same times as copies of rows: in a table of its own, and in a catalog table
    # (by the driver's loop, PySpark 3.5's way, whichever PySpark this is), with a crash right
    # after the first commit: run again, it commits nothing more
    rows_table = str(Path(workdir) / "table-rows")
    import cdc_emitter.read.apply as applying

    rows_crash: list = []

    def commit_then_crash(*args, **kwargs):
        result = apply_changes(*args, **kwargs)
        if not rows_crash:
            rows_crash.append(result.time)
            raise RuntimeError("simulated crash after the Delta commit")
        return result

    applying.apply_changes = commit_then_crash
    try:
        apply_topic(spark, bootstrap, topic, rows_table, "", multiplicity="rows", driver=True)
    except RuntimeError:
        pass
    finally:
        applying.apply_changes = apply_changes
    rows_redo = apply_topic(
        spark, bootstrap, topic, rows_table, "", multiplicity="rows", driver=True
    )
    named = CliRunner().invoke(
        cli,
        [*args[:-3], "--to", "replica", "--checkpoint", str(Path(workdir) / "named-ck")]
        + ["--multiplicity", "rows", "--once", "--json"],
        prog_name="cdc-emitter",
    )
    produce([[Update((9, "z"), 1, -1)], Progress((0,), (2,), ((1, 1),))], to=other_topic)
    try:
        negative_table = str(Path(workdir) / "table-negative")
        apply_topic(
            spark,
            bootstrap,
            other_topic,
            negative_table,
            negative_table + "/_ck",
            multiplicity="rows",
        )
        negative = "applied"
    except Exception as exc:  # noqa: BLE001 - the refusal, through the query on PySpark 4
        said = [line for line in str(exc).splitlines() if "would be held" in line]
        negative = said[0] if said else str(exc)[-2000:]
    # a statement that contradicts time 3's count: the command stops, naming it
    produce([Progress((3,), (4,), ((3, 3),))])
    command()

    example = Path(__file__).resolve().parents[3] / "examples" / "round_trip.py"
    spec = importlib.util.spec_from_file_location("round_trip", example)
    assert spec is not None and spec.loader is not None
    round_trip = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(round_trip)
    trip = round_trip.run(spark, bootstrap, round_trip_topic, str(Path(workdir) / "round-trip"))

    def versions_of(path: str) -> dict:
        versions = {}
        for row in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect():
            rows = (
                spark.read.format("delta").option("versionAsOf", row["version"]).load(path)
            ).collect()
            meta = json.loads(row["userMetadata"]) if row["userMetadata"] else {}
            versions[row["version"]] = {
                "time": meta.get("cdc-emitter", {}).get("time"),
                "rows": sorted([list(r) for r in rows], key=repr),
            }
        return versions

    print(
        json.dumps(
            {
                "versions": versions_of(table),
                "rows_versions": versions_of(rows_table),
                "rows_crash": rows_crash,
                "rows_redo": [[r.version, r.time] for r in rows_redo],
                "named": {
                    "exit": named.exit_code,
                    "stdout": named.stdout,
                    "stderr": named.stderr,
                    "rows": sorted([list(r) for r in spark.table("replica").collect()], key=repr),
                },
                "negative": negative,
                "round_trip": trip,
                "written": [[list(u.data), u.time, u.diff] for u in written],
                "commands": commands,
                "crash": crash,
                "crashed_at": crashed,
                "commits_before_crash": commits_before_crash,
                "redo": [[r.version, r.time] for r in redo],
                "engine": "stream" if streaming else "driver",
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
