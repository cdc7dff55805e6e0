"""``read_cdc``: read a CDCv2 topic back with Spark, for topics past one machine.

The local verifier (:mod:`cdc_emitter.verify`) reads a topic in one Python process. Here Spark's
Kafka source reads every partition up to the end offsets taken when the read starts (a snapshot,
as ``verify`` without a target), Spark decodes (``from_avro`` per union branch: spark-avro cannot
read a top-level union), removes duplicates and counts; the driver holds only the progress
statements, the count of distinct updates per time and the violations.

What the result says, and how it relates to :class:`~cdc_emitter.core.CdcReader`:

* ``frontier``: the reach of the gapless chain of progress statements from time 0, lowered to
  the first time whose distinct updates are fewer than its count (``()``: closed and complete);
  the same rule as the local reader's.
* ``collection``: the data columns and ``count``, the multiset at the frontier (rows with a
  non-zero count); ``history``: the data columns, ``time`` and ``diff``, one row per distinct
  ``(data, time)`` below the frontier. DataFrames: nothing is collected to the driver.
* ``violations``: the same kinds as the local reader. Statements are checked by a
  :class:`~cdc_emitter.core.CdcReader` on the driver, in (partition, offset) order, so their
  violations name partitions and offsets as the local one does; undecodable messages, negative
  times and zero diffs name theirs too. Where the local reader's report depends on arrival order
  the batch view differs: every ``(data, time)`` with more than one diff is a
  ``conflicting_diff`` (reported once; the diff of the first message in (partition, offset)
  order is kept) — the local reader sees one that arrives after its time was reported only with
  ``strict`` — and an ``over_count`` is reported once per update beyond its time's count,
  without a partition and offset.

Guarantees: the updates are never collected to the driver; a missing topic raises
:class:`~cdc_emitter.errors.BrokerError` before Spark starts; messages written after the read
began are not read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core import CdcReader, Progress, Violation
from .errors import CdcError, SchemaError

__all__ = ["read_cdc", "CdcRead"]

#: Violations of one kind brought to the driver at most (their total is always counted).
MAX_REPORTED = 10_000


@dataclass
class CdcRead:
    """What :func:`read_cdc` found (see the module docstring)."""

    frontier: tuple[int, ...]
    collection: Any  # DataFrame: data columns + count
    history: Any  # DataFrame: data columns + time + diff
    violations: list[Violation] = field(default_factory=list)
    messages: int = 0
    statements: int = 0
    updates: int = 0  # distinct (data, time) updates read
    duplicates: int = 0  # update copies beyond the first of each (data, time, diff)
    held: int = 0  # distinct updates at or beyond the frontier (not proven yet)
    #: ``violations``; ``verified``: not empty, and nothing read is left unproven (no update
    #: beyond the frontier, no count the topic does not hold, no gap in the statements);
    #: else ``unproven``
    verdict: str = "unproven"


def _data_schema(schema: Any) -> dict:
    from .codec import data_schema_from_text

    if isinstance(schema, (str, Path)):
        try:
            text = Path(schema).read_text(encoding="utf-8")
        except OSError as exc:
            raise SchemaError(f"cannot read schema file {schema}: {exc}") from None
        return data_schema_from_text(text)
    if isinstance(schema, (dict, list)):
        return data_schema_from_text(json.dumps(schema))
    raise SchemaError(f"schema must be a path or an Avro schema (dict or list), not {type(schema).__name__}")


def _source_options(bootstrap_servers: str, config: Mapping[str, Any]) -> dict[str, str]:
    """Spark's Kafka source options for librdkafka-style ``config`` (security settings)."""
    from .sink_jvm import java_client_options

    producer_only = {"acks", "enable.idempotence", "delivery.timeout.ms", "linger.ms", "batch.size",
                     "compression.type", "max.request.size", "max.in.flight.requests.per.connection"}
    options = java_client_options(
        config, unknown="kafka_options key {key!r} has no equivalent in Spark's Kafka source, which "
                        "read_cdc uses: leave it out",
        unsupported="sasl.mechanism {mechanism!r} is not supported by read_cdc")
    return {"kafka.bootstrap.servers": bootstrap_servers,
            **{k: v for k, v in options.items() if k[len("kafka."):] not in producer_only}}


def read_cdc(spark: Any, *, bootstrap_servers: str, topic: str, schema: Any, framing: str = "confluent",
             kafka_options: Mapping[str, Any] | None = None, until: int | None = None) -> CdcRead:
    """Read ``topic`` with Spark and verify it (see the module docstring).

    ``schema``: the data record (or the whole documented union) as a path or a dict;
    ``kafka_options``: librdkafka-style client settings, as ``-X`` takes them (security
    settings are translated for Spark's Kafka source); ``until``: report the collection and
    history as of time ``until`` (times below it), which must not be beyond the frontier.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from .codec import union_schema
    from .kafka_io import end_offsets

    if framing not in ("confluent", "raw"):
        raise CdcError(f"framing must be 'confluent' or 'raw', not {framing!r}")
    config = dict(kafka_options or {})
    branches = union_schema(_data_schema(schema))
    ends = end_offsets(bootstrap_servers, topic, config)  # BrokerError: missing topic, no broker
    options = _source_options(bootstrap_servers, config)
    reader = spark.read.format("kafka").options(**options).option("subscribe", topic)
    reader = reader.option("startingOffsets", json.dumps({topic: {str(p): low for p, (low, _h) in ends.items()}}))
    raw = reader.option("endingOffsets", json.dumps({topic: {str(p): high for p, (_l, high) in ends.items()}})).load()

    skip = 5 if framing == "confluent" else 0
    value = F.col("value")
    framed = F.lit(True) if skip == 0 else (F.substring(value, 1, 1) == F.lit(b"\x00"))
    branch = F.when(framed, F.substring(value, skip + 1, 1))
    body = F.expr(f"substring(value, {skip + 2})")
    permissive = {"mode": "PERMISSIVE"}
    decoded = raw.select(
        "partition", "offset",
        F.when(branch == F.lit(b"\x00"), from_avro(body, json.dumps(branches[0]), permissive)).alias("u"),
        F.when(branch == F.lit(b"\x02"), from_avro(body, json.dumps(branches[1]), permissive)).alias("p"),
        F.when(value.isNull(), F.lit("the message has no value (a tombstone)"))
        .when(~framed, F.lit("no Confluent framing (the first byte is not 0)"))
        .when(~branch.isin(b"\x00", b"\x02"), F.lit("not a CDC union branch (update array or progress)"))
        .alias("why"),
    ).persist()
    try:
        return _read(decoded, until)
    finally:
        decoded.unpersist()


def _read(decoded: Any, until: int | None) -> CdcRead:
    from pyspark.sql import functions as F

    from .sink_jvm import group_keys

    violations: list[Violation] = []
    # one job brings the few messages the driver needs: the progress statements (one per batch a
    # sink writes; checked on the driver by the local reader) and the undecodable messages
    undecodable = F.col("why").isNotNull() | (F.col("u").isNull() & F.col("p").isNull())
    few = (decoded.filter(undecodable | F.col("p").isNotNull())
           .select("partition", "offset", "p", F.when(undecodable, F.coalesce(
               "why", F.lit("the Avro body does not decode with the schema"))).alias("why"))
           .orderBy("partition", "offset").collect())
    statements = [row for row in few if row["why"] is None]
    bad = [row for row in few if row["why"] is not None]
    for row in bad[:MAX_REPORTED]:
        violations.append(Violation("undecodable", None, row["why"], row["partition"], row["offset"]))
    checker = CdcReader()
    for row in statements:
        p = row["p"]
        counts = tuple((c["time"], c["count"]) for c in p["counts"] or ())
        checker.push(Progress(tuple(p["lower"] or ()), tuple(p["upper"] or ()), counts),
                     partition=row["partition"], offset=row["offset"])
    violations.extend(checker.violations)
    pending = checker.pending()
    reach = pending.progress[0] if pending.progress else None  # None: the chain is closed
    announced = {t: c for t, c, _received in pending.stalled}

    # updates: exploded, checked, then one row per (data, time) — the first diff in
    # (partition, offset) order, and how many distinct diffs and copies arrived
    data_fields = [f.name for f in decoded.schema["u"].dataType.elementType["data"].dataType.fields]
    exploded = (decoded.filter(F.col("u").isNotNull())
                .select("partition", "offset", F.explode("u").alias("x"))
                .select("partition", "offset", "x.data.*", F.col("x.time").alias("__time"),
                        F.col("x.diff").alias("__diff")))
    wrong = (exploded.filter((F.col("__time") < 0) | (F.col("__diff") == 0))
             .select("partition", "offset", F.to_json(F.struct(*data_fields)).alias("row"), "__time", "__diff")
             .orderBy("partition", "offset").limit(MAX_REPORTED).collect())
    for row in wrong:
        t = row["__time"]
        if t < 0:
            violations.append(Violation("negative_time", t, f"update {row['row']} at negative time {t}",
                                        row["partition"], row["offset"]))
        else:
            violations.append(Violation("zero_diff", t, f"update {row['row']} at time {t} has diff 0",
                                        row["partition"], row["offset"]))
    good = exploded.filter((F.col("__time") >= 0) & (F.col("__diff") != 0))
    keys, firsts = group_keys(good.schema, data_fields)
    where = F.struct("partition", "offset")
    # distinct diffs of one (data, time): 1, or 2 when they differ (a third distinct diff of the
    # same update, already a violation, is counted as a duplicate; a count_distinct would cost
    # the whole aggregation an expansion and a second shuffle)
    per_update = (good.groupBy(*keys, F.col("__time"))
                  .agg(F.min_by("__diff", where).alias("__diff"),
                       F.when(F.min("__diff") == F.max("__diff"), 1).otherwise(2).alias("__diffs"),
                       F.count(F.lit(1)).alias("__copies"), *firsts)
                  .persist())
    try:
        per_time = {r["__time"]: (r["n"], r["c"], r["d"]) for r in per_update.groupBy("__time").agg(
            F.count(F.lit(1)).alias("n"), F.sum("__copies").alias("c"),
            F.sum("__diffs").alias("d")).collect()}
        conflicts = (per_update.filter(F.col("__diffs") > 1)
                     .select(F.to_json(F.struct(*data_fields)).alias("row"), "__time", "__diff")
                     .orderBy("__time").limit(MAX_REPORTED).collect())
        for row in conflicts:
            violations.append(Violation(
                "conflicting_diff", row["__time"],
                f"data {row['row']} at time {row['__time']} has more than one diff (kept {row['__diff']})"))

        frontier = reach
        for t in sorted(set(announced) | set(per_time)):
            if reach is not None and t >= reach:
                break
            received, stated = per_time.get(t, (0, 0, 0))[0], announced.get(t, 0)
            if received > stated:
                violations.extend(Violation("over_count", t, f"time {t} has more distinct updates than "
                                            f"its count {stated}") for _ in range(received - stated))
            elif received < stated and (frontier is None or t < frontier):
                frontier = t
        if until is not None:
            if frontier is not None and until > frontier:
                raise CdcError(f"the topic is proven complete only up to frontier {frontier}, not "
                               f"up to {until}: read with until <= {frontier}, or wait for more")
            frontier_cut = until
        else:
            frontier_cut = frontier
        below = per_update if frontier_cut is None else per_update.filter(F.col("__time") < F.lit(frontier_cut))
        history = below.select(*data_fields, F.col("__time").alias("time"), F.col("__diff").alias("diff"))
        collection_keys, collection_firsts = group_keys(below.schema, data_fields)
        collection = (below.groupBy(*collection_keys).agg(F.sum("__diff").alias("count"), *collection_firsts)
                      .filter(F.col("count") != 0).select(*data_fields, "count"))
    finally:  # the DataFrames returned read the same pinned offsets again when used

        per_update.unpersist()
    updates = sum(n for n, _c, _d in per_time.values())
    copies = sum(c for _n, c, _d in per_time.values())
    held = sum(n for t, (n, _c, _d) in per_time.items() if frontier is not None and t >= frontier)
    messages = decoded.count()
    if violations:
        verdict = "violations"
    elif messages and held == 0 and frontier == reach and pending.gap is None:
        verdict = "verified"
    else:
        verdict = "unproven"
    return CdcRead(
        frontier=() if frontier is None else (frontier,), collection=collection, history=history,
        violations=violations, messages=messages, statements=len(statements), updates=updates,
        duplicates=copies - sum(d for _n, _c, d in per_time.values()), held=held, verdict=verdict,
    )
