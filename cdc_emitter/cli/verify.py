"""``cdc-emitter verify``: read a CDC topic from the beginning and prove it exact, in this
process (``--engine local``) or with Spark (``--engine spark``)."""

from __future__ import annotations

import math
import sys
import time

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
    NoSchemaYet,
    codec_options,
    kafka_options,
    open_reader,
    spark_options,
    start_spark,
)
from cdc_emitter.cli.output import (
    StatusLine,
    dumps,
    frontier_text,
    sorted_collection,
    verify_summary_text,
    write_collection,
    write_history,
)
from cdc_emitter.errors import CdcError, ConfigError
from cdc_emitter.spark.errors import spark_error_text


@main.command()
@kafka_options
@click.option("--topic", required=True, help="The topic to verify.")
@codec_options
@click.option(
    "--until-frontier",
    type=click.IntRange(min=0),
    metavar="N",
    help="Follow the topic until every time < N is complete (frontier >= [N] or closed).",
)
@click.option("--until-closed", is_flag=True, help="Follow the topic until the history is closed.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="S",
    help="Give up after S seconds (exit 3 if the target was not reached).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    metavar="FILE",
    help='Write the collection at the frontier as JSON lines {"data": ..., "count": n}.',
)
@click.option(
    "--history",
    "history_file",
    type=click.Path(dir_okay=False, allow_dash=True),
    metavar="FILE",
    help="Write the reconstructed updates in time order as JSON lines "
    '{"data": ..., "time": t, "diff": d}.',
)
@click.option(
    "--strict",
    type=click.Choice(["exact", "bloom"]),
    is_flag=False,
    flag_value="exact",
    default=None,
    metavar="[exact|bloom]",
    help="Remember what was reported, so a late update that is no exact duplicate is a "
    "violation. exact (the default of --strict): keeps every update, as much memory "
    "as holding them; bloom: a Bloom filter, about 3.4 MiB per million updates, "
    "misses such an update with probability 0.001. With --engine spark both are "
    "decided exactly, at no memory cost here.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    metavar="N",
    help="Processes that decode messages (default: one per core once the topic "
    "proves large; 0: decode in this process). Local engine only.",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="local: this process reads the topic (fast to start, follows a live topic, "
    "memory grows with what is held beyond the frontier); spark: Spark reads and "
    "decodes it, this process holds only the progress statements and the violations "
    "(topics past one machine's memory). Same summary, --output and exit codes.",
)
@spark_options
@handle_errors
def verify(
    bootstrap_servers,
    kafka_settings,
    broker_timeout,
    topic,
    schema_file,
    schema_registry,
    registry_settings,
    framing,
    schema_id,
    until_frontier,
    until_closed,
    timeout,
    as_json,
    output,
    history_file,
    strict,
    workers,
    engine,
    spark_packages,
    spark_conf,
    spark_remote,
):
    """Read a CDC topic from the beginning and prove it exact.

    Reads every partition from offset 0 (no consumer group, nothing committed), removes
    duplicates, restores order, checks every progress statement against every other and
    reports each protocol violation (conflicting diffs, over-counts, disagreeing progress,
    counts outside their interval, negative times or counts, undecodable messages with
    partition and offset, and the likely cause of those once).

    Without --until-frontier/--until-closed it verifies what the topic holds now, and says
    "verified" only when the end of the topic leaves nothing unproven: an empty topic, updates
    no progress statement covers, a count the topic does not hold, or a gap in the progress
    chain are named and exit 3. With a target it follows the topic until the frontier reaches
    it (or --timeout expires).

    --engine spark reads the topic with Spark (--remote, --packages and --conf as export
    takes them) and decides exactly as the local engine does reading the partitions one
    after another: the same summary, --output and --history lines and exit codes. This
    process then holds only the progress statements and the violations, so topics larger
    than its memory verify; Spark's start-up costs seconds, and with a target it reads the
    topic again whenever it grows.

    The schema: without --schema or --schema-registry, the one the sink wrote into the
    header of the topic's newest progress statement. With --until-frontier or --until-closed
    a topic that has none yet is waited on for its first, within --timeout (exit 3 if none
    comes). A --schema file that differs from it (other columns, types, nullability or order)
    is refused, naming the columns (exit 2).

    \b
    Exit codes: 0 verified, 1 violations found (takes precedence), 2 usage, schema or
    connection error, 3 not proven: the target was not reached within --timeout, or (without a
    target) the topic is empty or ends with part of its history unproven.

    \b
    Example:
      cdc-emitter verify --bootstrap-servers 127.0.0.1:9092 --topic products \\
          --until-frontier 10 --timeout 60 --output products.jsonl
      cdc-emitter verify --topic products --engine spark --conf spark.driver.memory=2g --json
      cdc-emitter verify --topic orders --schema orders.avsc   # a topic another tool wrote
    """
    _check_engine_options(engine, until_frontier, until_closed, workers, spark_packages, spark_conf)
    status = StatusLine()
    on_interrupt(
        lambda: f"verify of topic {topic} stopped before its end: nothing proven, nothing written"
    )
    target = _target(until_frontier, until_closed)
    # with a target, verify follows the topic, and may start before its writer: the schema
    # from the first progress statement is waited for as the target is (up to --timeout)
    follows = target is not None and schema_file is None and schema_registry is None
    started = time.monotonic()
    if follows:
        status.show(f"waiting for the first progress statement of topic {topic} (its schema)")
    try:
        servers, codec = open_reader(
            bootstrap_servers,
            topic,
            kafka_settings,
            broker_timeout,
            schema_file,
            framing,
            schema_id,
            schema_registry,
            registry_settings,
            wait_for_schema=(math.inf if timeout is None else timeout) if follows else 0.0,
        )
    except NoSchemaYet as exc:
        if not follows:
            raise
        from cdc_emitter.read.verify import VerifyResult

        status.done()
        nothing: VerifyResult[dict, list] = VerifyResult((0,), target=target, hints=[str(exc)])
        _verify_report(topic, nothing, None, timeout, as_json, None, None, None, None)
    left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
    if engine == "spark":
        result = _verify_with_spark(
            status,
            servers,
            topic,
            codec,
            kafka_settings,
            broker_timeout,
            until_frontier,
            until_closed,
            left,
            strict,
            spark_packages,
            spark_conf,
            spark_remote,
        )
        collection = result.collection_rows() if output is not None else None
        history = result.history_rows() if history_file is not None else None
    else:
        result = _verify_locally(
            status,
            servers,
            topic,
            codec,
            kafka_settings,
            broker_timeout,
            until_frontier,
            until_closed,
            left,
            strict,
            workers,
            keep_collection=output is not None,
            keep_history=history_file is not None,
        )
        collection = None
        if output is not None and result.collection is not None:  # kept: keep_collection above
            collection = sorted_collection(result.collection, codec)
        history = result.history
    try:
        _verify_report(
            topic, result, codec, timeout, as_json, output, collection, history_file, history
        )
    finally:  # SystemExit too: a session shared with the caller keeps nothing of this reading
        if engine == "spark":
            result.unpersist()


def _target(until_frontier: int | None, until_closed: bool) -> tuple[int, ...] | None:
    """The frontier verify follows the topic to: ``(N,)``, ``()`` (closed), or None (its end)."""
    if until_frontier is not None:
        return (until_frontier,)
    return () if until_closed else None


def _check_engine_options(
    engine, until_frontier, until_closed, workers, spark_packages, spark_conf
) -> None:
    """Usage errors for targets that exclude each other and options of the other engine."""
    if until_frontier is not None and until_closed:
        raise click.UsageError("--until-frontier and --until-closed exclude each other")
    if engine == "local" and (spark_packages or spark_conf):
        raise click.UsageError("--packages and --conf are for --engine spark")
    if engine == "spark" and workers is not None:
        raise click.UsageError("--workers is for --engine local (Spark decodes on its executors)")


def _verify_locally(
    status,
    servers,
    topic,
    codec,
    kafka_settings,
    broker_timeout,
    until_frontier,
    until_closed,
    timeout,
    strict,
    workers,
    *,
    keep_collection,
    keep_history,
):
    """``verify --engine local``: verify_topic in this process, its progress on the status line."""
    from cdc_emitter.read.verify import verify_topic

    def on_progress(p) -> None:
        status.show(
            f"{p.messages} messages, {p.updates} updates, frontier "
            f"{frontier_text(p.frontier)}, lag {p.lag} messages"
        )

    def on_warning(text: str) -> None:
        status.done()
        click.echo(f"warning: {text}", err=True)

    try:
        return verify_topic(
            servers,
            topic,
            codec,
            until_frontier=until_frontier,
            until_closed=until_closed,
            timeout=timeout,
            config=kafka_settings,
            on_progress=on_progress if status.enabled else None,
            on_warning=on_warning,
            keep_collection=keep_collection,
            keep_history=keep_history,
            strict=strict,
            workers=workers,
            broker_timeout=broker_timeout,
        )
    finally:
        status.done()


def _verify_with_spark(
    status,
    servers,
    topic,
    codec,
    kafka_settings,
    broker_timeout,
    until_frontier,
    until_closed,
    timeout,
    strict,
    spark_packages,
    spark_conf,
    spark_remote,
):
    """``verify --engine spark``: read_cdc on a session made as ``export`` makes one."""
    from cdc_emitter.read.spark_reader import read_cdc

    status.show(f"starting Spark to read topic {topic}")
    try:
        spark = start_spark("cdc-emitter verify", spark_packages, spark_conf, None, spark_remote)
        status.show(f"reading topic {topic} with Spark")
        registry = getattr(codec.writer_schemas, "__self__", None)  # --schema-registry's
        by_registry = (
            {}
            if registry is None
            else {
                "schema_registry_url": registry.url,
                "schema_registry_config": registry.config,
                "schema_id": codec.schema_id,
            }
        )
        return read_cdc(
            spark,
            bootstrap_servers=servers,
            topic=topic,
            schema=None if registry is not None else codec.data_schema,
            framing=codec.framing,
            kafka_options=kafka_settings,
            strict=strict,
            until_frontier=until_frontier,
            until_closed=until_closed,
            timeout=timeout,
            broker_timeout=broker_timeout,
            **by_registry,
        )
    except CdcError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark's own failure: its cause, not a traceback
        raise ConfigError(f"Spark could not read topic {topic!r}: {spark_error_text(exc)}") from exc
    finally:
        status.done()


def _verify_report(
    topic, result, codec, timeout, as_json, output, collection, history_file, history
) -> None:
    """Write --output and --history, print the summary, exit with the verdict's code."""
    if output is not None:
        with click.open_file(output, "w", encoding="utf-8") as fh:
            write_collection(fh, collection, codec)
    if history_file is not None:
        with click.open_file(history_file, "w", encoding="utf-8") as fh:
            write_history(fh, history, codec)

    code = {"verified": EXIT_OK, "violations": EXIT_VIOLATIONS}.get(
        result.verdict, EXIT_NOT_REACHED
    )
    if as_json:
        click.echo(dumps(result.summary()))
    else:
        click.echo(verify_summary_text(topic, result, timeout))
    sys.exit(code)
