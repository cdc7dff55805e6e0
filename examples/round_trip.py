"""The round trip, with a crash at every step: Spark → CdcSink → Kafka → cdcv2 → Delta.

    python examples/round_trip.py BOOTSTRAP TOPIC WORKDIR

A source table changes in rounds (inserts, updates and deletes, rows held twice, a row with a
null: each round a JSON file of ``k, v, t, diff`` rows, ``t`` the round). A streaming query
writes each round into TOPIC through `CdcSink`; after each round's, a query of the ``cdcv2``
source applies the topic to two Delta tables, one commit each per micro-batch: one keeps a
``count`` column, the other copies of rows. Three crashes, each followed by a restart of the
same query from its checkpoint:

1. the sink's query, right after the sink wrote a batch (before Spark commits it);
2. the apply query, right after it read a batch (before it applied it);
3. the apply query, right after its Delta commit (before Spark commits the batch).

Then every Delta version of both tables is compared, by time travel, with the source table at
the time that version recorded. Prints one JSON line; exits 1 unless every version is right,
every crash happened and the last round was applied.

On PySpark 3.5, which has no ``cdcv2`` source, the apply step is `read_cdc_stream`'s loop,
restarted from the count table's recorded time (so after the third crash it does not read the
committed batch again: the table is its checkpoint). Needs Delta Lake, spark-avro and spark-sql-kafka (the
``__main__`` below adds their packages).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

#: Each round's changes: (k, v, diff). A row updated is a delete and an insert.
ROUNDS = [
    [(1, "a", 1), (2, "b", 1), (3, "c", 1), (7, None, 1)],
    [(2, "b", -1), (2, "B", 1), (4, "d", 1), (4, "d", 1), (7, None, 1)],  # rows held twice
    [(1, "a", -1), (4, "d", -1), (5, "e", 1), (7, None, -1)],  # one copy of each deleted
    [(3, "c", -1), (3, "C", 1), (6, None, 1), (7, None, -1)],  # a row with a null, deleted
]


class Crash(RuntimeError):
    """A simulated crash."""


def source_at(time: int) -> Counter:
    """The source table after round ``time``: each row and how many times it is there."""
    table: Counter = Counter()
    for round_ in ROUNDS[: time + 1]:
        for k, v, diff in round_:
            table[(k, v)] += diff
    return +table


def run(spark: Any, bootstrap: str, topic: str, workdir: str) -> dict:
    """The round trip in ``spark`` (a session with Delta and the sink's packages)."""
    from cdc_emitter import CdcSink, read_cdc_stream
    from cdc_emitter.read.apply import applied_time, apply_changes

    work = Path(workdir)
    source, table, copies = work / "source", str(work / "table"), str(work / "copies")
    sink_checkpoint, apply_checkpoint = work / "sink-checkpoint", work / "apply-checkpoint"
    crashes: list[str] = []

    def write_round(time: int, crash: bool) -> None:
        source.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"k": k, "v": v, "t": time, "diff": d}) for k, v, d in ROUNDS[time]]
        (source / f"round-{time:03d}.json").write_text("\n".join(lines) + "\n")
        sink = CdcSink(bootstrap, topic, checkpoint_location=str(sink_checkpoint), time_column="t")

        def batch(df, batch_id):
            sink(df, batch_id)
            if crash and not crashes:
                crashes.append(f"sink after writing batch {batch_id}")
                raise Crash("after the sink wrote the batch")

        for _ in range(2):  # a crash, then its restart
            query = (
                spark.readStream.schema("k long, v string, t long, diff long")
                .json(str(source))
                .writeStream.foreachBatch(batch)
                .option("checkpointLocation", str(sink_checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            try:
                query.awaitTermination()
                return
            except Exception as exc:  # noqa: BLE001 - the crash, through the query
                if "after the sink wrote" not in str(exc):
                    raise
        raise RuntimeError(f"round {time}: the sink's query crashed twice")

    def apply_round(crash: str | None) -> None:
        def step(df, _batch_id):
            if crash == "after read" and len(crashes) == 1:
                crashes.append("apply after reading a batch")
                raise Crash("after reading the batch")
            apply_changes(df, table, topic)
            apply_changes(df, copies, topic, multiplicity="rows")
            if crash == "after commit" and len(crashes) == 2:
                crashes.append("apply after its Delta commit")
                raise Crash("after the Delta commit")

        for _ in range(2):  # a crash, then its restart
            try:
                if hasattr(spark, "dataSource"):  # PySpark 4: the cdcv2 streaming source
                    from cdc_emitter import register

                    register(spark)
                    query = (
                        spark.readStream.format("cdcv2")
                        .option("kafka.bootstrap.servers", bootstrap)
                        .option("topic", topic)
                        .load()
                        .writeStream.foreachBatch(step)
                        .option("checkpointLocation", str(apply_checkpoint))
                        .start()
                    )
                    try:
                        query.processAllAvailable()
                    finally:
                        query.stop()
                else:  # PySpark 3.5: the same batches in a loop, from the table's last time
                    done = applied_time(spark, table, topic)
                    start = 0 if done is None else done + 1
                    for batch in read_cdc_stream(spark, bootstrap, topic, start=start, once=True):
                        if batch.updates:
                            step(batch.df, None)
                return
            except Exception as exc:  # noqa: BLE001 - the crash, through the query
                if "after reading the batch" not in str(exc) and "after the Delta" not in str(exc):
                    raise
        raise RuntimeError(f"the apply query crashed twice ({crash})")

    write_round(0, crash=False)
    apply_round(None)
    write_round(1, crash=True)
    apply_round("after read")
    write_round(2, crash=False)
    apply_round("after commit")
    write_round(3, crash=False)
    apply_round(None)

    versions, wrong = [], []
    for path, kept in ((table, "count"), (copies, "rows")):
        history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
        for row in history:
            recorded = json.loads(row["userMetadata"] or "{}").get("cdc-emitter", {})
            if "time" not in recorded:
                continue  # the table's creation
            time = recorded["time"]
            held = spark.read.format("delta").option("versionAsOf", row["version"]).load(path)
            got = _collection(held.collect(), kept)
            versions.append({"table": kept, "version": row["version"], "time": time})
            if got != source_at(time):
                shown = got if isinstance(got, str) else sorted(got.items(), key=repr)
                wrong.append({"table": kept, "version": row["version"], "time": time, "got": shown})
    last = len(ROUNDS) - 1
    ok = (
        not wrong
        and len(crashes) == 3
        and all(
            any(v["time"] == last for v in versions if v["table"] == t) for t in ("count", "rows")
        )
    )
    return {"ok": ok, "crashes": crashes, "versions": versions, "wrong": wrong}


def _collection(rows: list, kept: str) -> Counter | str:
    """The table's rows as a collection; a text saying what is wrong when a count table holds
    a row twice or a count below 1 (a Counter would hide both)."""
    if kept == "rows":
        return Counter((r["k"], r["v"]) for r in rows)
    keys = [(r["k"], r["v"]) for r in rows]
    if len(set(keys)) != len(keys) or any(r["count"] < 1 for r in rows):
        return f"a row twice, or a count below 1: {sorted(map(tuple, rows), key=repr)}"
    return Counter({(r["k"], r["v"]): r["count"] for r in rows})


def main(bootstrap: str, topic: str, workdir: str) -> int:
    import pyspark

    from cdc_emitter.spark.session import delta_package, spark_session
    from cdc_emitter.spark.setup import sink_packages

    spark = spark_session(
        "cdc-emitter-round-trip",
        [delta_package(pyspark.__version__), *sink_packages()],
        {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"},
        "delta",
    )
    result = run(spark, bootstrap, topic, workdir)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
