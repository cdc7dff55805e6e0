"""``cdc-emitter export``: a table read by Spark written to a topic as one CDC snapshot (or the
difference of two), or with ``--from-topic`` the other way, the table a topic holds."""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import click

from cdc_emitter.cli.console import (
    EXIT_NOT_REACHED,
    EXIT_OK,
    EXIT_VIOLATIONS,
    handle_errors,
    main,
    on_interrupt,
)
from cdc_emitter.cli.options import (
    check_inputs,
    check_kafka,
    check_registry_options,
    kafka_options,
    parse_settings,
    reader_data_schema,
    registry_options,
    require_servers,
    spark_options,
    start_spark,
)
from cdc_emitter.cli.output import (
    StatusLine,
    dumps,
    export_summary,
    frontier_text,
    verify_summary_text,
)
from cdc_emitter.errors import ConfigError, SchemaError
from cdc_emitter.spark.errors import spark_error_text
from cdc_emitter.spark.tables import FORMATS, malformed_input_error, read_table


@main.command()
@click.argument("source", required=False)
@kafka_options
@click.option("--topic", help="The topic to write to.")
@click.option(
    "--from-topic",
    metavar="TOPIC",
    help="The other way: write the table the CDC topic TOPIC holds (the collection at "
    "its frontier, or at --as-of) to --to, read and verified with Spark.",
)
@click.option("--to", "destination", metavar="PATH", help="With --from-topic: the table to write.")
@click.option(
    "--as-of",
    type=click.IntRange(min=0),
    metavar="N",
    help="With --from-topic: the table as of time N (every time below N), at most the "
    "topic's frontier.",
)
@click.option(
    "--schema",
    "schema_file",
    type=click.Path(exists=True, dir_okay=False, readable=True),
    help="With --from-topic: the topic's Avro schema file (the union or the data record; "
    "default: the schema the sink wrote into the topic's progress statements).",
)
@click.option(
    "--mode",
    type=click.Choice(["error", "overwrite"]),
    default="error",
    show_default=True,
    help="With --from-topic: what to do when --to exists.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="parquet",
    show_default=True,
    help="How Spark reads SOURCE (and --previous).",
)
@click.option(
    "-O",
    "read_options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=parse_settings,
    help="A Spark reader option (repeatable), e.g. -O header=true -O inferSchema=true.",
)
@click.option(
    "--time",
    "at_time",
    type=click.IntRange(min=0),
    metavar="N",
    help="The CDC time of the snapshot (default: the topic's current frontier).",
)
@click.option(
    "--previous",
    metavar="SOURCE2",
    help="Write the difference from this earlier snapshot instead of the whole table.",
)
@click.option("--close", is_flag=True, help="Close the history after this snapshot (upper: []).")
@click.option("--create-topic", is_flag=True, help="Create the topic if it does not exist.")
@click.option(
    "--framing",
    type=click.Choice(["confluent", "raw"]),
    default="confluent",
    show_default=True,
    help="Message framing.",
)
@click.option(
    "--schema-id",
    type=click.IntRange(0, 2**31 - 1),
    default=None,
    help="Schema id in the Confluent header (default 0; with --schema-registry, the "
    "registry's id).",
)
@registry_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object.")
@spark_options
@handle_errors
def export(
    source,
    bootstrap_servers,
    kafka_settings,
    broker_timeout,
    topic,
    from_topic,
    destination,
    as_of,
    schema_file,
    mode,
    fmt,
    read_options,
    at_time,
    previous,
    close,
    create_topic,
    framing,
    schema_id,
    schema_registry,
    registry_settings,
    as_json,
    spark_packages,
    spark_conf,
    spark_remote,
):
    """Write a table read by Spark to a topic as one CDC snapshot (or the difference of two).

    Every row of SOURCE becomes an update with diff +1 at time N (equal rows add up to a
    higher multiplicity). With --previous SOURCE2 it writes the difference instead: rows of
    SOURCE +1, rows of SOURCE2 -1, so unchanged rows cancel. The progress statement that covers
    them is claimed first, from the topic's current frontier, so the progress chain stays
    gapless; --close ends the history (upper: []). An export interrupted after its claim leaves
    readers waiting on its time: the same command run again completes it (and, when that export
    was complete, writes only duplicates of the same data).

    \b
    Examples:
      cdc-emitter export data/products_v1.parquet --topic products --time 1 --create-topic
      cdc-emitter export data/products_v2.parquet --previous data/products_v1.parquet \\
          --topic products --time 2 --close --json
      cdc-emitter export orders --format jdbc -O url=jdbc:postgresql://db/shop \\
          -O driver=org.postgresql.Driver -O user=reader -O password=... \\
          --packages org.postgresql:postgresql:42.7.4 --topic orders

    With --from-topic TOPIC it goes the other way: Spark reads and verifies the CDC topic (as
    verify --engine spark does) and writes the table it holds at its frontier, or --as-of N,
    to --to (--format, -O as writer options): each row as many times as its multiplicity,
    so an exported table comes back as it was. Nothing is written when the topic has
    violations (exit 1, the summary printed), when the time asked for is not proven (exit 3),
    or when a row's multiplicity is negative (exit 2). The topic is read with the schema the
    sink wrote into its progress statements, or with --schema FILE (a topic another tool
    wrote; refused when it differs from the sink's).

    \b
      cdc-emitter export --from-topic products --to products_v2.parquet
    """
    if from_topic is not None and (schema_registry or registry_settings):
        raise click.UsageError("--schema-registry is for writing a topic, not with --from-topic")
    if from_topic is not None:
        return _export_from_topic(
            bootstrap_servers,
            kafka_settings,
            broker_timeout,
            from_topic,
            destination,
            as_of,
            schema_file,
            mode,
            fmt,
            read_options,
            framing,
            as_json,
            spark_packages,
            spark_conf,
            spark_remote,
            stray=[
                name
                for name, value in (
                    ("SOURCE", source),
                    ("--topic", topic),
                    ("--previous", previous),
                    ("--time", at_time),
                    ("--close", close or None),
                    ("--create-topic", create_topic or None),
                )
                if value is not None
            ],
        )
    if source is None or topic is None:
        raise click.UsageError("give SOURCE and --topic (or --from-topic TOPIC --to PATH)")
    stray = [
        name
        for name, value in (("--to", destination), ("--as-of", as_of), ("--schema", schema_file))
        if value is not None
    ]
    if stray:
        raise click.UsageError(f"{', '.join(stray)}: only with --from-topic")
    check_registry_options(schema_registry, registry_settings, framing, schema_id)
    servers = require_servers(bootstrap_servers)
    check_inputs([source, previous], fmt, spark_remote, spark_conf, read_options)
    check_kafka(servers, kafka_settings, broker_timeout, topic, require_topic=not create_topic)
    status = StatusLine()
    status.show(f"starting Spark to read {source}")
    try:
        spark = start_spark("cdc-emitter export", spark_packages, spark_conf, fmt, spark_remote)
        df = _snapshot_updates(spark, source, previous, fmt, read_options)
        status.show(f"writing {source} to topic {topic}")
        from cdc_emitter.sink.sink import CdcSink

        sink = CdcSink(
            servers,
            topic,
            framing=framing,
            schema_id=schema_id or 0,
            schema_registry_url=schema_registry,
            schema_registry_config=registry_settings or None,
            producer_config=kafka_settings or None,
            create_topic=create_topic,
            broker_timeout=broker_timeout,
            writer_id=export_writer_id(source, previous, topic),
            complete_last=True,
        )
        on_interrupt(lambda: export_left(sink, topic))
        try:
            written = sink.write(df, time=at_time, close=close)
        except Exception as exc:
            # Spark reads a CSV lazily: a malformed line fails the sink's first job (before
            # anything is claimed); say which line, not Spark's stack
            malformed = malformed_input_error(exc, [source, previous], fmt, read_options)
            if malformed is None:
                raise
            raise malformed from exc
    finally:
        status.done()
    summary = export_summary(source, previous, topic, at_time, written)
    if as_json:
        click.echo(dumps(summary))
    else:
        what = f"{source} (difference from {previous})" if previous is not None else source
        click.echo(
            f"exported {what} to topic {topic} at time {summary['time']}: "
            f"{summary['updates']} updates in {summary['messages']} messages, "
            f"frontier {frontier_text(tuple(summary['frontier']))}"
        )
    sys.exit(EXIT_OK)


def export_left(sink: Any, topic: str) -> str:
    """What an export stopped in its write left on ``topic``, and how to complete it."""
    unfinished = sink.unfinished
    if unfinished is None:
        return f"nothing was written to topic {topic}"
    times = f"[{unfinished.lower}, {'∞' if unfinished.upper is None else unfinished.upper})"
    if not unfinished.confirmed:
        return (
            f"the claim of times {times} on topic {topic} may have been committed, with part of "
            "its updates; run the same command again: it completes them"
        )
    return (
        f"topic {topic} has times {times} claimed and only part of their updates written; "
        f"readers wait at time {unfinished.lower} until the same command is run again, which "
        "completes them"
    )


def export_writer_id(source: str, previous: str | None, topic: str) -> str:
    """The writer id of an export: the same for the same SOURCE, --previous and topic, so that
    the same command run again completes a batch an interrupted run claimed (readers wait on it
    until then) — and writes nothing new when that batch is complete with the same data."""
    text = json.dumps([source, previous, topic])
    return "export-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _snapshot_updates(spark, source, previous, fmt, read_options):
    """SOURCE's rows with diff +1 and, with --previous, SOURCE2's with diff -1."""
    from pyspark.sql import functions as F

    current = read_table(spark, source, fmt, read_options)
    diff_col = "diff"
    if diff_col in current.columns:
        raise SchemaError(f"source {source!r} has a column named {diff_col!r}; rename it")
    df = current.withColumn(diff_col, F.lit(1).cast("long"))
    if previous is not None:
        before = read_table(spark, previous, fmt, read_options)
        if [f.name for f in before.schema.fields] != [f.name for f in current.schema.fields]:
            raise SchemaError(
                f"--previous {previous!r} has columns {before.columns}, "
                f"but {source!r} has {current.columns}"
            )
        df = df.unionByName(before.withColumn(diff_col, F.lit(-1).cast("long")))
    return df


def _export_from_topic(
    bootstrap_servers,
    kafka_settings,
    broker_timeout,
    topic,
    destination,
    as_of,
    schema_file,
    mode,
    fmt,
    write_options,
    framing,
    as_json,
    spark_packages,
    spark_conf,
    spark_remote,
    stray,
):
    """``export --from-topic``: the table a CDC topic holds, verified, written by Spark."""
    if stray:
        raise click.UsageError(f"--from-topic does not go with {', '.join(stray)}")
    if destination is None:
        raise click.UsageError("--from-topic needs --to PATH")
    if fmt in ("jdbc", "table", "text"):
        raise click.UsageError(f"--from-topic writes files: --format {fmt} is not one of them")
    servers = require_servers(bootstrap_servers)
    check_kafka(servers, kafka_settings, broker_timeout, topic, require_topic=True, reading=True)
    data_schema = reader_data_schema(
        schema_file, servers, topic, kafka_settings, broker_timeout, hint="pass --schema FILE"
    )
    status = StatusLine()
    from cdc_emitter.read.spark_reader import read_cdc

    status.show(f"starting Spark to read topic {topic}")
    result = None
    try:
        spark = start_spark("cdc-emitter export", spark_packages, spark_conf, fmt, spark_remote)
        status.show(f"reading and verifying topic {topic}")
        result = read_cdc(
            spark,
            bootstrap_servers=servers,
            topic=topic,
            schema=data_schema,
            framing=framing,
            kafka_options=kafka_settings,
            broker_timeout=broker_timeout,
        )
        frontier = result.frontier
        _check_provable(status, topic, result, as_of)
        rows, written = _table_rows(result, topic, as_of)
        status.show(f"writing the table of topic {topic} to {destination}")
        on_interrupt(
            lambda: (
                f"{destination} may be partly written: run the same command again "
                "with --mode overwrite"
            )
        )
        _save_table(rows, fmt, write_options, mode, destination)
    finally:  # SystemExit too: a session shared with the caller keeps nothing of this reading
        status.done()
        if result is not None:
            result.unpersist()
    time = as_of if as_of is not None else (frontier[0] if frontier else None)
    summary = {
        "topic": topic,
        "to": destination,
        "format": fmt,
        "as_of": time,
        "frontier": list(frontier),
        "verdict": result.verdict,
        "rows": written,
    }
    if as_json:
        click.echo(dumps(summary))
    else:
        at = f"as of time {time}" if time is not None else "closed history"
        click.echo(
            f"exported topic {topic} ({at}, frontier {frontier_text(frontier)}) to {destination}: "
            f"{written} rows"
        )
    sys.exit(EXIT_OK)


def _check_provable(status, topic, result, as_of) -> None:
    """Exit 1 with the summary when the topic has violations, 3 when --as-of is beyond its
    frontier: nothing is written then."""
    if result.violations:
        status.done()
        click.echo(verify_summary_text(topic, result, None))
        sys.exit(EXIT_VIOLATIONS)
    frontier = result.frontier
    if as_of is not None and frontier and as_of > frontier[0]:
        status.done()
        click.echo(
            f"error: topic {topic} is proven only up to frontier {frontier_text(frontier)}: "
            f"--as-of {as_of} is beyond it, nothing written",
            err=True,
        )
        sys.exit(EXIT_NOT_REACHED)


def _table_rows(result, topic, as_of):
    """The rows of the table the topic holds (each as often as its multiplicity) and their
    number; a SchemaError if a multiplicity is negative."""
    from pyspark.sql import functions as F

    collection = result.collection_frame if as_of is None else result.collection_as_of(as_of)
    negative = collection.filter(F.col("count") < 0).limit(1).collect()
    if negative:
        row = negative[0].asDict(recursive=True)
        count = row.pop("count")
        raise SchemaError(
            f"topic {topic} holds row {row} with multiplicity {count} at "
            f"{'time ' + str(as_of) if as_of is not None else 'its frontier'}: a "
            "table cannot hold it, nothing written"
        )
    data_cols = [c for c in collection.columns if c != "count"]
    written = collection.agg(F.coalesce(F.sum("count"), F.lit(0))).collect()[0][0]
    rows = collection.select(
        *data_cols,
        F.explode(F.array_repeat(F.lit(True), F.col("count").cast("int"))).alias("__one"),
    ).drop("__one")
    return rows, written


def _save_table(rows, fmt, write_options, mode, destination) -> None:
    """Write ``rows`` to ``destination``; Spark's failure as a ConfigError naming its cause."""
    try:
        rows.write.format(fmt).options(**write_options).mode(
            "errorifexists" if mode == "error" else "overwrite"
        ).save(destination)
    except Exception as exc:  # noqa: BLE001 - Spark's own cause, not a traceback
        raise ConfigError(
            f"cannot write {fmt} table {destination}: {spark_error_text(exc)}"
        ) from exc
