"""``cdc-emitter apply``: keep a Delta table equal to a CDCv2 topic, exactly once (see
`cdc_emitter.read.apply`)."""

from __future__ import annotations

import os
import sys

import click

from cdc_emitter.cli.console import EXIT_OK, handle_errors, main, on_interrupt
from cdc_emitter.cli.options import (
    check_kafka,
    kafka_options,
    require_servers,
    spark_options,
    start_spark,
    with_delta_package,
)
from cdc_emitter.cli.output import StatusLine, dumps
from cdc_emitter.errors import CdcError, ViolationError

#: Where the query's checkpoint goes without --checkpoint: inside the table's directory, under
#: a name Delta ignores (it skips names starting with "_").
DEFAULT_CHECKPOINT = "_cdc_emitter_checkpoint"


@main.command(name="apply")
@kafka_options
@click.option("--topic", required=True, help="The CDCv2 topic to apply.")
@click.option(
    "--to",
    "table",
    required=True,
    metavar="PATH_OR_TABLE",
    help="The Delta table: a path (any Hadoop path; it has a '/', so write ./name for a "
    "relative one) or a catalog table's name (db.table); made if missing.",
)
@click.option(
    "--checkpoint",
    metavar="DIR",
    help=f"The streaming query's checkpoint (default: PATH/{DEFAULT_CHECKPOINT}; needed for a "
    "catalog table). Losing it "
    "costs a re-read of the topic, never a time applied twice: the table records its last time "
    "(on PySpark 3.5 that record is the only checkpoint, and this option is not used).",
)
@click.option(
    "--once",
    is_flag=True,
    help="Apply every time that is complete now, then stop. Without it the command follows "
    "the topic until interrupted (Ctrl-C).",
)
@click.option(
    "--trigger-interval",
    metavar="INTERVAL",
    help="Start a micro-batch at most this often, in Spark's words ('10 seconds', "
    "'1 minute'). Default: 5 seconds when following the topic, back to back with --once. A "
    "time is in the table within two intervals when a batch fits in one; shorter intervals "
    "make more, smaller Delta commits.",
)
@click.option(
    "--multiplicity",
    type=click.Choice(["count", "rows"]),
    default="count",
    show_default=True,
    help="How a row held more than once is kept: a 'count' column beside the data columns "
    "(a row whose count reaches 0 is deleted), or as that many copies of the row ('rows': the "
    "table has the data columns only; a multiplicity below 0 is refused).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object at the end.")
@spark_options
@handle_errors
def apply_command(
    bootstrap_servers: str | None,
    kafka_settings: dict,
    broker_timeout: float,
    topic: str,
    table: str,
    checkpoint: str | None,
    once: bool,
    trigger_interval: str | None,
    multiplicity: str,
    as_json: bool,
    spark_packages: tuple[str, ...],
    spark_conf: dict,
    spark_remote: str | None,
) -> None:
    """Keep a Delta table (PATH_OR_TABLE) equal to the collection of a CDCv2 topic.

    Each micro-batch holds the updates of whole times the topic proved complete (the cdcv2
    source: never an open time, never a time twice) and becomes one Delta commit: each row's
    net change is merged into the table, whose columns are the data columns and "count" (the
    row's multiplicity; a row whose count reaches 0 is deleted), or, with --multiplicity rows,
    the data columns only, a row held n times being there n times. The commit records the last
    time applied, so after a crash, or with a lost checkpoint, no time is applied twice, and
    Delta's time travel shows the collection at every applied time.

    Needs Delta Lake (its package for this Spark is added unless --packages names one). On
    PySpark 3.5, which has no Python data sources, the driver follows the topic itself with
    the same batches and commits; the table's record of its last time is then the checkpoint.

    \b
    Example:
      cdc-emitter apply --bootstrap-servers 127.0.0.1:9092 --topic products \\
          --to /data/products-replica --once
    """
    servers = require_servers(bootstrap_servers)
    from cdc_emitter.read.apply import trigger_seconds

    if trigger_interval is not None:
        trigger_seconds(trigger_interval)  # said before Spark starts, as is what follows
    checkpoint = checkpoint or _default_checkpoint(table)
    check_kafka(servers, kafka_settings, broker_timeout, topic)
    status = StatusLine()
    applied: list = []

    def stopped() -> str:
        last = next((r.time for r in reversed(applied) if r.time is not None), None)
        holds = "no time yet" if last is None else f"every time up to {last}"
        return (
            f"apply of topic {topic} stopped: table {table} holds {holds}; run the same command "
            "again to go on"
        )

    on_interrupt(stopped)
    status.show(f"starting Spark to apply topic {topic}")
    spark = start_spark(
        "cdc-emitter apply",
        with_delta_package(spark_packages, spark_remote),
        spark_conf,
        "delta",
        spark_remote,
    )

    def shown(result) -> None:
        applied.append(result)
        if result.version is not None:
            status.show(
                f"table {table} at time {result.time} (version {result.version}, "
                f"{result.rows} rows changed)"
            )

    status.show(f"applying topic {topic} to {table}")
    from cdc_emitter.read.apply import apply_topic
    from cdc_emitter.spark.errors import python_worker_error, spark_error_text

    try:
        apply_topic(
            spark,
            servers,
            topic,
            table,
            checkpoint,
            once=once,
            config=kafka_settings,
            broker_timeout=broker_timeout,
            trigger_interval=trigger_interval,
            on_batch=shown,
            multiplicity=multiplicity,
        )
    except ViolationError as exc:  # raised here on PySpark 3.5, through the query on 4
        raise CdcError(f"applying topic {topic} to {table} failed: {exc}") from None
    except CdcError:
        raise
    except Exception as exc:  # noqa: BLE001 - the query's failure, ours or Spark's
        cause = python_worker_error(exc) or spark_error_text(exc)
        raise CdcError(f"applying topic {topic} to {table} failed: {cause}") from None
    finally:
        status.done()
    commits = [r for r in applied if r.version is not None]
    last = commits[-1] if commits else None
    summary = {
        "topic": topic,
        "table": table,
        "commits": None if spark_remote else len(commits),
        "time": None if last is None else last.time,
        "version": None if last is None else last.version,
    }
    if as_json:
        click.echo(dumps(summary))
    elif spark_remote:
        click.echo(f"applied topic {topic} to {table} (each batch's commit is in the server's log)")
    elif last is None:
        click.echo(f"applied topic {topic} to {table}: no new complete times")
    else:
        click.echo(
            f"applied topic {topic} to {table}: {len(commits)} commits, the table holds every "
            f"time up to {last.time} (version {last.version})"
        )
    sys.exit(EXIT_OK)


def _default_checkpoint(table: str) -> str:
    """PATH/_cdc_emitter_checkpoint; a catalog table has no path of ours to put it in.

    Raises:
        UsageError: A catalog table on PySpark 4 (whose streaming query needs a checkpoint).
    """
    from cdc_emitter.read.apply import is_path

    if is_path(table):
        return os.path.join(table, DEFAULT_CHECKPOINT)
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        return ""  # PySpark 3.5 (Connect too): the driver's loop, the table its checkpoint
    raise click.UsageError(
        f"--to {table} names a catalog table, which has no directory of ours for the "
        "streaming query's checkpoint: pass --checkpoint DIR (or --to a path: ./name)"
    )
