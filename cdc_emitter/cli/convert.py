"""``cdc-emitter convert``: a changefeed another system keeps, as a CDCv2 topic (a Spark
Structured Streaming job through ``CdcSink``; see `cdc_emitter.convert.delta`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import click

from cdc_emitter.cli.console import EXIT_OK, handle_errors, main, on_interrupt
from cdc_emitter.cli.options import (
    check_inputs,
    check_kafka,
    check_registry_options,
    kafka_options,
    registry_options,
    require_servers,
    spark_options,
    start_spark,
    with_delta_package,
)
from cdc_emitter.cli.output import StatusLine, dumps, frontier_text
from cdc_emitter.errors import CdcError

if TYPE_CHECKING:  # Spark is imported when a command runs: --help stays fast
    from pyspark.sql.streaming import StreamingQuery

    from cdc_emitter.sink.result import BatchResult

#: The formats whose SOURCE is a Kafka topic of a changefeed in JSON.
KAFKA_SOURCES = ("cockroachdb", "ydb")


@main.command()
@click.argument("fmt", metavar="FORMAT", type=click.Choice(["delta", "cockroachdb", "ydb"]))
@click.argument("source")
@kafka_options
@click.option("--topic", required=True, help="The CDC topic to write.")
@click.option(
    "--checkpoint",
    "checkpoint",
    required=True,
    metavar="DIR",
    help="The streaming query's checkpoint (any Hadoop path); a second run continues from it.",
)
@click.option(
    "--once",
    is_flag=True,
    help="Convert every change there is now, then stop (Spark's availableNow trigger). "
    "Without it the job runs until interrupted (Ctrl-C).",
)
@click.option("--create-topic", is_flag=True, help="Create the topic if it does not exist.")
@click.option(
    "--starting-version",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="delta: the first table version to convert (the change data feed must be enabled "
    "from it on).",
)
@click.option(
    "--max-files-per-trigger",
    type=click.IntRange(min=1),
    metavar="N",
    help="delta: at most about N files per micro-batch (a version split over batches is "
    "held open until all of it has arrived).",
)
@click.option(
    "--columns",
    metavar="DDL",
    help="cockroachdb, ydb: the table's columns in the topic's order, e.g. "
    "'id long not null, name string' (nullable unless 'not null').",
)
@click.option(
    "--key",
    "key_columns",
    metavar="COLS",
    help="ydb: the primary-key columns (comma-separated), in the order of the messages' 'key'.",
)
@click.option(
    "--source-bootstrap-servers",
    metavar="HOST:PORT",
    help="cockroachdb, ydb: the Kafka cluster of SOURCE (default: --bootstrap-servers; -X "
    "security settings apply to both).",
)
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    metavar="N",
    help="cockroachdb, ydb: at most N source messages per micro-batch.",
)
@click.option(
    "--trigger-interval",
    metavar="INTERVAL",
    help="Start a micro-batch at most this often, e.g. '10 seconds' (default: as soon as the "
    "previous one ends).",
)
@click.option(
    "--redundant",
    is_flag=True,
    help="This run is one of several identical runs writing the topic (high availability: the "
    "same SOURCE, options and batches, each with its own --checkpoint): a batch another run "
    "already claimed with the same updates is written as duplicates, so the topic is complete "
    "while any one run lives. A batch that differs fails before it writes.",
)
@registry_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object at the end.")
@spark_options
@handle_errors
def convert(
    fmt: str,
    source: str,
    bootstrap_servers: str | None,
    kafka_settings: dict,
    broker_timeout: float,
    topic: str,
    checkpoint: str,
    once: bool,
    create_topic: bool,
    starting_version: int,
    max_files_per_trigger: int | None,
    columns: str | None,
    key_columns: str | None,
    source_bootstrap_servers: str | None,
    max_offsets_per_trigger: int | None,
    trigger_interval: str | None,
    redundant: bool,
    schema_registry: str | None,
    registry_settings: dict,
    as_json: bool,
    spark_packages: tuple[str, ...],
    spark_conf: dict[str, str],
    spark_remote: str | None,
) -> None:
    """Convert the changefeed of SOURCE into a CDCv2 topic, continuously or --once.

    \b
    delta: SOURCE is a Delta table path (with a '/') or name; its change data feed must be
           enabled (delta.enableChangeDataFeed = true). insert and update_postimage rows count
           +1, delete and update_preimage -1, at time = the commit version; a version's
           progress statement is written only once all of its change rows are in the topic.

    The topic gets the table's columns, with the sink's guarantees: a retried batch or a
    restart from --checkpoint writes the same updates and progress statements again, never
    new ones. On a terminal a line shows each batch as it is written. Delta Lake's package for
    the running Spark is loaded unless --packages names one.

    \b
    cockroachdb: SOURCE is a Kafka topic of a CockroachDB changefeed in JSON, created WITH
           updated, resolved, diff (wrapped envelope): 'before' counts -1, 'after' +1, at
           the wall-clock nanoseconds of 'updated'; duplicates are written once.
    ydb:   SOURCE is a Kafka topic of a YDB changefeed in JSON, MODE = 'NEW_AND_OLD_IMAGES',
           VIRTUAL_TIMESTAMPS and resolved barriers: 'oldImage' -1, 'newImage' +1, at the
           'step' of 'ts'; --key names the primary-key columns.
    For both, --columns gives the table's columns, and a progress statement closes the times
    below the smallest resolved timestamp of all partitions; later rows wait in SOURCE.

    \b
    Example:
      cdc-emitter convert delta /data/products --topic products --checkpoint /ckpt/products \\
          --once --create-topic
    """
    kafka_source = fmt in KAFKA_SOURCES
    _check_format_options(
        fmt,
        starting_version=starting_version,
        max_files_per_trigger=max_files_per_trigger,
        columns=columns,
        key_columns=key_columns,
        source_bootstrap_servers=source_bootstrap_servers,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )
    check_registry_options(schema_registry, registry_settings, "confluent", None)
    servers = require_servers(bootstrap_servers)
    from cdc_emitter.convert.delta import is_path

    if fmt == "delta" and is_path(source):
        check_inputs([source], "delta", spark_remote, spark_conf)
    check_kafka(servers, kafka_settings, broker_timeout, topic, require_topic=not create_topic)
    status = StatusLine()
    results: list[BatchResult] = []

    def shown(result: BatchResult) -> None:
        results.append(result)
        status.show(
            f"batch {result.batch_id}: times [{result.lower}, "
            f"{'∞' if result.upper is None else result.upper}) written, {result.updates} updates "
            f"({sum(r.updates for r in results)} in all)"
        )

    def stopped() -> str:
        # on Spark Connect the batches run in the server's Python: this process sees none
        done = "" if spark_remote else f" after {len(results)} batches written to topic {topic}"
        return (
            f"the query stopped{done}; run the same command again to go on from checkpoint "
            f"{checkpoint} (a batch it was writing is completed first: readers wait on its "
            "times until then)"
        )

    on_interrupt(stopped)
    status.show(f"starting Spark to read {source}")
    try:
        spark = start_spark(
            "cdc-emitter convert",
            list(spark_packages)
            if kafka_source
            else with_delta_package(spark_packages, spark_remote),
            spark_conf,
            None if kafka_source else "delta",
            spark_remote,
        )
        start = _query_starter(
            spark,
            fmt,
            source,
            servers=servers,
            topic=topic,
            checkpoint=checkpoint,
            once=once,
            trigger_interval=trigger_interval,
            starting_version=starting_version,
            max_files_per_trigger=max_files_per_trigger,
            columns=columns,
            key_columns=key_columns,
            source_bootstrap_servers=source_bootstrap_servers,
            max_offsets_per_trigger=max_offsets_per_trigger,
            kafka_settings=kafka_settings,
            sink_options=dict(
                create_topic=create_topic,
                producer_config=kafka_settings or None,
                broker_timeout=broker_timeout,
                on_batch=shown,
                schema_registry_url=schema_registry,
                schema_registry_config=registry_settings or None,
                redundant=redundant,
            ),
        )
        status.show(f"converting {source} to topic {topic}")
        # on Spark Connect the sink runs in the server's Python: on_batch is never seen here,
        # so what the run did is read from the topic itself
        before = (
            _topic_frontier(servers, topic, kafka_settings, broker_timeout, before=True)
            if spark_remote
            else None
        )
        _run(start, source, topic)
    finally:
        status.done()
    if spark_remote:
        after = _topic_frontier(servers, topic, kafka_settings, broker_timeout)
        frontier = None if after == before else after
    else:
        # the last batch's upper is the topic's frontier (None: no batch wrote anything this run)
        frontier = (
            None if not results else () if results[-1].upper is None else (results[-1].upper,)
        )
    summary = _summary(source, fmt, topic, results, frontier, remote=bool(spark_remote))
    _echo_summary(summary, frontier, as_json=as_json, remote=bool(spark_remote))
    sys.exit(EXIT_OK)


def _query_starter(
    spark: Any,
    fmt: str,
    source: str,
    *,
    servers: str,
    topic: str,
    checkpoint: str,
    once: bool,
    trigger_interval: str | None,
    starting_version: int,
    max_files_per_trigger: int | None,
    columns: str | None,
    key_columns: str | None,
    source_bootstrap_servers: str | None,
    max_offsets_per_trigger: int | None,
    kafka_settings: dict,
    sink_options: dict[str, Any],
) -> Callable[[], StreamingQuery]:
    """What starts the streaming query for ``fmt`` (`_run` calls it again on a restart)."""
    if fmt in KAFKA_SOURCES:
        from cdc_emitter.convert.changefeed import convert_kafka

        key = [k.strip() for k in (key_columns or "").split(",") if k.strip()]

        def start() -> StreamingQuery:
            return convert_kafka(
                spark,
                fmt,
                source,
                columns=cast(str, columns),  # required for these formats
                key=key,
                bootstrap_servers=servers,
                topic=topic,
                checkpoint_location=checkpoint,
                source_bootstrap_servers=source_bootstrap_servers,
                source_config=kafka_settings,
                once=once,
                trigger_interval=trigger_interval,
                max_offsets_per_trigger=max_offsets_per_trigger,
                **sink_options,
            )
    else:
        from cdc_emitter.convert.delta import convert_delta

        def start() -> StreamingQuery:
            return convert_delta(
                spark,
                source,
                bootstrap_servers=servers,
                topic=topic,
                checkpoint_location=checkpoint,
                once=once,
                starting_version=starting_version,
                max_files_per_trigger=max_files_per_trigger,
                trigger_interval=trigger_interval,
                **sink_options,
            )

    return start


def _summary(
    source: str,
    fmt: str,
    topic: str,
    results: list[BatchResult],
    frontier: tuple | None,
    *,
    remote: bool,
) -> dict[str, Any]:
    """The run's summary (``--json``); on Spark Connect the batches are not seen here: None."""
    return {
        "source": source,
        "format": fmt,
        "topic": topic,
        "batches": None if remote else len(results),
        "updates": None if remote else sum(r.updates for r in results),
        "messages": None if remote else sum(r.messages for r in results),
        "frontier": None if frontier is None else list(frontier),
    }


def _check_format_options(
    fmt: str,
    *,
    starting_version: int,
    max_files_per_trigger: int | None,
    columns: str | None,
    key_columns: str | None,
    source_bootstrap_servers: str | None,
    max_offsets_per_trigger: int | None,
) -> None:
    """Refuse the options that are not for ``fmt``, and require those it needs."""
    kafka_source = fmt in KAFKA_SOURCES
    only = [
        (name, value)
        for name, value, applies in (
            ("--starting-version", starting_version or None, not kafka_source),
            ("--max-files-per-trigger", max_files_per_trigger, not kafka_source),
            ("--columns", columns, kafka_source),
            ("--key", key_columns, fmt == "ydb"),
            ("--source-bootstrap-servers", source_bootstrap_servers, kafka_source),
            ("--max-offsets-per-trigger", max_offsets_per_trigger, kafka_source),
        )
        if value is not None and not applies
    ]
    if only:
        raise click.UsageError(f"{', '.join(n for n, _v in only)}: not for {fmt}")
    if kafka_source and not columns:
        raise click.UsageError(
            f"{fmt} needs --columns: the table's columns, e.g. 'id long not null, name string'"
        )
    if fmt == "ydb" and not key_columns:
        raise click.UsageError(
            "ydb needs --key: the primary-key columns, in the order of the messages' 'key'"
        )


def _run(start: Callable[[], StreamingQuery], source: str, topic: str) -> None:
    """Run the conversion (restarted as `await_conversion`
    does); a failure that is not ours becomes a `CdcError` naming the source and topic."""
    from cdc_emitter.convert.changefeed import await_conversion, conversion_error

    try:
        await_conversion(start)
    except CdcError:
        raise
    except Exception as exc:  # noqa: BLE001 - the query's failure, ours or Spark's
        raise CdcError(
            f"converting {source} to topic {topic} failed: {conversion_error(exc)}"
        ) from None


def _echo_summary(
    summary: dict[str, Any], frontier: tuple | None, *, as_json: bool, remote: bool
) -> None:
    """Print what the run did: the summary as JSON, or a line."""
    fmt, source, topic = summary["format"], summary["source"], summary["topic"]
    table = "topic" if fmt in KAFKA_SOURCES else "table"
    if as_json:
        click.echo(dumps(summary))
    elif frontier is None:
        click.echo(f"converted {fmt} {table} {source} to topic {topic}: no new changes")
    elif remote:
        click.echo(
            f"converted {fmt} {table} {source} to topic {topic}: frontier {frontier_text(frontier)} "
            "(each batch's stats are in the Spark Connect server's log)"
        )
    else:
        click.echo(
            f"converted {fmt} {table} {source} to topic {topic}: {summary['updates']} updates in "
            f"{summary['batches']} batches, frontier {frontier_text(frontier)}"
        )


def _topic_frontier(
    servers: str, topic: str, settings: dict, broker_timeout: float, *, before: bool = False
) -> tuple | None:
    """The topic's frontier as its progress statements say (``()``: closed). ``before`` the run,
    a topic that cannot be read yet (``--create-topic`` makes it) is None: the run itself then
    reports a broker that cannot be reached."""
    from cdc_emitter.errors import BrokerError
    from cdc_emitter.sink.sink import CdcSink

    sink = CdcSink(servers, topic, producer_config=settings or None, broker_timeout=broker_timeout)
    try:
        state = sink.frontier()
    except BrokerError:
        if not before:
            raise
        return None
    finally:
        sink.close()
    return () if state.frontier is None else (state.frontier,)
