"""The Delta converter's job, in its own process (Delta needs its package and session extensions
when the session starts; the test session has neither).

    python delta_jobs.py DELTA_PACKAGE BOOTSTRAP TOPIC WORKDIR CLI_TOPIC

Makes ``WORKDIR/products`` with its change data feed enabled and, in two rounds, commits of every
kind (inserts, updates, a no-op update, deletes, a commit of many files), converting after each
round with ``convert_delta(once=True, max_files_per_trigger=2)`` from the same checkpoint, so
many-file commits are split over micro-batches. Also makes ``WORKDIR/plain`` without the change
data feed. Then, in the same session, the command line (through click's ``CliRunner``): ``convert
delta`` of the same table into ``CLI_TOPIC``, the same again from its checkpoint, and ``convert
delta`` of the plain table — each a new process would start Spark with Delta again (20–40 s each).
Prints one JSON line: the table's rows at each version (time travel), each batch's result, the
plans the converter recorded, and each command's exit code, standard output and error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(package: str, bootstrap: str, topic: str, workdir: str, cli_topic: str) -> None:
    from cdc_emitter.convert.delta import convert_delta
    from cdc_emitter.spark.session import spark_session

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the integration tests' helpers
    from helpers import DELTA_TEST_CONF, frame

    spark = spark_session(
        "delta-jobs",
        [package],
        {"spark.sql.shuffle.partitions": "2", "spark.master": "local[2]", **DELTA_TEST_CONF},
        "delta",
    )
    work = Path(workdir)
    table = str(work / "products")
    checkpoint = str(work / "checkpoint")
    ident = f"delta.`{table}`"
    spark.sql(
        f"CREATE TABLE {ident} (id long, name string, price int) USING delta "
        "TBLPROPERTIES (delta.enableChangeDataFeed = true)"
    )  # v0
    spark.sql(f"CREATE TABLE delta.`{work / 'plain'}` (id long) USING delta")

    def insert(rows, files):
        (
            frame(spark, rows, "id long, name string, price int")
            .repartition(files)
            .write.format("delta")
            .mode("append")
            .save(table)
        )

    results = []

    def run():
        query = convert_delta(
            spark,
            table,
            bootstrap_servers=bootstrap,
            topic=topic,
            checkpoint_location=checkpoint,
            once=True,
            max_files_per_trigger=2,
            create_topic=True,
            on_batch=results.append,
        )
        query.awaitTermination()

    insert([(i, f"p{i}", 10 * i) for i in range(1, 6)], 5)  # v1: 5 files
    spark.sql(f"UPDATE {ident} SET price = price + 1 WHERE id = 2")  # v2
    spark.sql(f"DELETE FROM {ident} WHERE id = 3")  # v3
    insert([(i, f"bulk{i % 7}", i) for i in range(100, 160)], 6)  # v4: 6 files
    spark.sql(f"UPDATE {ident} SET name = name WHERE id = 1")  # v5: no change
    run()
    first_run = len(results)
    spark.sql(f"DELETE FROM {ident} WHERE id >= 130")  # v6: many files
    insert([(7, "p7", 70), (1, "p1", 10)], 2)  # v7: a duplicate row
    spark.sql(f"UPDATE {ident} SET price = 0 WHERE id < 110")  # v8
    run()
    latest = spark.sql(f"DESCRIBE HISTORY {ident}").agg({"version": "max"}).collect()[0][0]
    versions = {
        v: sorted(
            tuple(r)
            for r in spark.read.format("delta").option("versionAsOf", v).load(table).collect()
        )
        for v in range(latest + 1)
    }
    plans = sorted(
        (
            json.loads(p.read_text())
            for p in (work / "checkpoint" / "cdc-emitter-convert").iterdir()
            if p.name.isdigit()
        ),
        key=lambda p: p["batch_id"],
    )
    cli = {
        "convert": convert_cli(
            table,
            "--topic",
            cli_topic,
            "--checkpoint",
            str(work / "cli-checkpoint"),
            "--once",
            "--bootstrap-servers",
            bootstrap,
            "--json",
        )
    }
    cli["rerun"] = convert_cli(
        table,
        "--topic",
        cli_topic,
        "--checkpoint",
        str(work / "cli-checkpoint"),
        "--once",
        "--bootstrap-servers",
        bootstrap,
    )
    cli["plain"] = convert_cli(
        str(work / "plain"),
        "--topic",
        "never-created",
        "--create-topic",  # else the missing topic is said first, before Spark starts
        "--checkpoint",
        str(work / "plain-checkpoint"),
        "--once",
        "--bootstrap-servers",
        bootstrap,
    )
    print(
        json.dumps(
            {
                "versions": versions,
                "first_run": first_run,
                "results": [r.as_dict() for r in results],
                "plans": plans,
                "cli": cli,
            }
        )
    )


def convert_cli(*args: str) -> dict:
    """``cdc-emitter convert delta ARGS`` in this process (its session is this one, which has
    Delta): its exit code, standard output and standard error."""
    from click.testing import CliRunner
    from helpers import DELTA_TEST_ARGS

    from cdc_emitter.cli import main

    done = CliRunner().invoke(
        main, ["convert", "delta", *args, *DELTA_TEST_ARGS], prog_name="cdc-emitter"
    )
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return {"exit": done.exit_code, "stdout": done.stdout, "stderr": done.stderr}


if __name__ == "__main__":
    main(*sys.argv[1:6])
