"""The ``cdc-emitter`` commands: verify, tail, schema, export (thin: library calls + output);
``convert`` is in `convert`, on the shared options defined here.

Exit codes (every command): 0 success; 2 usage, schema, configuration or connection error
(printed as ``error: ...`` on stderr, never a traceback). ``verify`` adds 1 (protocol violations,
takes precedence) and 3 (not proven: the target frontier was not reached in time, or without a
target the topic is empty or ends with part of its history unproven); ``tail`` exits 1 when a
message could not be decoded.

Spark is imported only by the commands that need it (``export``, ``schema --columns/--from``,
``verify --engine spark``, ``convert``), so ``verify`` and ``tail`` start fast and run where no JVM is installed.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, Literal

import click

from cdc_emitter import __version__
from cdc_emitter.cli.output import (
    StatusLine,
    dumps,
    export_summary,
    frontier_text,
    sorted_collection,
    verify_summary_text,
    write_collection,
    write_history,
)
from cdc_emitter.errors import CdcError, ConfigError, SchemaError
from cdc_emitter.protocol.materialize import create_source_sql
from cdc_emitter.protocol.materialize import source_name as default_source_name
from cdc_emitter.spark.errors import spark_error_text
from cdc_emitter.spark.session import spark_session
from cdc_emitter.spark.tables import FORMATS, columns_struct, read_table

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"

EXIT_OK, EXIT_VIOLATIONS, EXIT_ERROR, EXIT_NOT_REACHED = 0, 1, 2, 3


# --- shared option machinery --------------------------------------------------------------------


def _parse_settings(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    """``key=value`` strings into a dict; a bad one is a usage error naming it (secrets masked)."""
    out: dict[str, str] = {}
    for n, item in enumerate(values, 1):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            # never echo it: without '=' there is no telling the key from a secret value
            raise click.BadParameter(
                f"setting number {n} is not of the form key=value (its text is not shown: it "
                "may hold a secret)",
                ctx=ctx,
                param=param,
            )
        out[key] = value
    return out


def _parse_registry_settings(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict:
    """As `_parse_settings`, and ``@FILE``: the ``key=value`` lines of a properties file
    (so a password need not be on the command line)."""
    items: list[str] = []
    for item in values:
        if item.startswith("@"):
            try:
                with open(item[1:], encoding="utf-8") as fh:
                    items += [
                        line.strip()
                        for line in fh
                        if line.strip() and not line.lstrip().startswith(("#", "!"))
                    ]
            except OSError as exc:
                raise click.BadParameter(  # noqa: B904 - the message carries the cause
                    f"cannot read {item[1:]}: {exc.strerror}", ctx=ctx, param=param
                )
        else:
            items.append(item)
    return _parse_settings(ctx, param, tuple(items))


def registry_options(func: Callable) -> Callable:
    """--schema-registry URL and repeated --schema-registry-config KEY=VALUE|@FILE."""
    func = click.option(
        "--schema-registry-config",
        "registry_settings",
        multiple=True,
        metavar="KEY=VALUE|@FILE",
        callback=_parse_registry_settings,
        help="A schema registry client setting (repeatable), e.g. basic.auth.user.info=USER:PASSWORD, "
        "bearer.auth.token=..., ssl.ca.location=FILE; @FILE reads key=value lines from FILE. "
        "Values are never echoed.",
    )(func)
    func = click.option(
        "--schema-registry",
        metavar="URL",
        help="A Confluent-compatible schema registry. Writing: register the topic's schema under "
        "subject TOPIC-value and frame messages with its id. Reading: each message's writer "
        "schema by the id in its header.",
    )(func)
    return func


def check_registry_options(
    registry: str | None, settings: dict, framing: str, schema_id: int | None
) -> None:
    """Usage errors for --schema-registry with options it excludes (writing commands)."""
    if registry is None:
        if settings:
            raise click.UsageError("--schema-registry-config needs --schema-registry")
        return
    if framing != "confluent":
        raise click.UsageError(
            "--schema-registry needs --framing confluent: the schema id is in the header"
        )
    if schema_id is not None:
        raise click.UsageError(
            "--schema-id and --schema-registry exclude each other: the registry gives the id"
        )


def kafka_options(func: Callable) -> Callable:
    """--bootstrap-servers, repeated -X key=value (librdkafka settings) and --broker-timeout."""
    func = click.option(
        "--broker-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=30.0,
        show_default=True,
        metavar="S",
        help="Seconds to wait for a Kafka broker that does not answer (metadata, offsets, or no "
        "progress while reading) before failing with exit code 2.",
    )(func)
    func = click.option(
        "-X",
        "kafka_settings",
        multiple=True,
        metavar="KEY=VALUE",
        callback=_parse_settings,
        help="A librdkafka setting, e.g. -X security.protocol=SASL_SSL (repeatable). "
        "Values are never echoed in messages.",
    )(func)
    func = click.option(
        "--bootstrap-servers",
        envvar=ENV_BOOTSTRAP,
        metavar="HOST:PORT",
        show_envvar=True,
        help="Kafka bootstrap servers (comma-separated).",
    )(func)
    return func


def codec_options(func: Callable) -> Callable:
    """--schema FILE, --framing, --schema-id."""
    func = click.option(
        "--schema-id",
        type=click.IntRange(0, 2**31 - 1),
        default=None,
        help="Schema id in the Confluent header (confluent framing; default 0, or with "
        "--schema-registry the id found in the topic).",
    )(func)
    func = click.option(
        "--framing",
        type=click.Choice(["confluent", "raw"]),
        default="confluent",
        show_default=True,
        help="confluent: a 0x00 byte and a 4-byte schema id before the Avro body; raw: none.",
    )(func)
    func = click.option(
        "--schema-registry-config",
        "registry_settings",
        multiple=True,
        metavar="KEY=VALUE|@FILE",
        callback=_parse_registry_settings,
        help="A schema registry client setting (repeatable), e.g. basic.auth.user.info=USER:PASSWORD; "
        "@FILE reads key=value lines from FILE. Values are never echoed.",
    )(func)
    func = click.option(
        "--schema-registry",
        metavar="URL",
        help="Read with this Confluent schema registry instead of --schema: the reader schema is "
        "the one of --schema-id (default: the id in the header of the topic's newest message), "
        "and each message is decoded with the schema of the id in its header, resolved into it "
        "(--framing raw: every message with --schema-id's).",
    )(func)
    func = click.option(
        "--schema",
        "schema_file",
        type=click.Path(exists=True, dir_okay=False, readable=True),
        help="Avro schema file: the full CDC union schema or just the `data` record schema "
        "(required unless --schema-registry).",
    )(func)
    return func


def spark_options(func: Callable) -> Callable:
    """--remote, --packages and --conf: which Spark export, schema --from and verify --engine spark
    run on, and what it loads."""
    func = click.option(
        "--remote",
        "spark_remote",
        envvar="SPARK_REMOTE",
        show_envvar=True,
        metavar="sc://HOST:PORT",
        help="Run on this Spark Connect server instead of a local Spark (its server loads the "
        "packages; needs pip install 'cdc-emitter[connect]').",
    )(func)
    func = click.option(
        "--conf",
        "spark_conf",
        multiple=True,
        metavar="KEY=VALUE",
        callback=_parse_settings,
        help="A Spark setting (repeatable), e.g. --conf spark.driver.memory=4g.",
    )(func)
    func = click.option(
        "--packages",
        "spark_packages",
        multiple=True,
        metavar="COORDS",
        callback=_split_packages,
        help="Maven coordinates of jars Spark should load (repeatable or comma-separated), e.g. "
        "the Delta Lake package for --format delta or a JDBC driver for --format jdbc.",
    )(func)
    return func


def _split_packages(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> list[str]:
    """Repeated and comma-separated --packages as one list of Maven coordinates."""
    return [c.strip() for item in values for c in item.split(",") if c.strip()]


def handle_errors(func: Callable) -> Callable:
    """Expected errors become ``error: ...`` on stderr and exit code 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CdcError as exc:
            _fail(str(exc))
        except OSError as exc:
            name = f" {exc.filename}" if getattr(exc, "filename", None) else ""
            _fail(f"cannot use file{name}: {exc.strerror or exc}")

    return wrapper


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def require_servers(bootstrap_servers: str | None) -> str:
    """The bootstrap servers given, stripped; a ConfigError that says how to give them if none."""
    if not bootstrap_servers or not bootstrap_servers.strip():
        raise ConfigError(
            f"no Kafka bootstrap servers given: pass --bootstrap-servers HOST:PORT or set {ENV_BOOTSTRAP}"
        )
    return bootstrap_servers.strip()


def load_data_schema(path: str) -> dict:
    """The data record schema from a schema file (full union schema or data record schema)."""
    from cdc_emitter.protocol.codec import data_schema_from_text

    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return data_schema_from_text(text)
    except SchemaError as exc:
        raise SchemaError(f"schema file {path}: {exc}") from exc
    except ValueError as exc:  # defensive: malformed JSON not wrapped by the codec
        raise SchemaError(f"schema file {path}: not a usable Avro schema: {exc}") from exc


def _topic_schema_id(servers: str, topic: str, settings: dict) -> int:
    """The schema id in the Confluent header of the newest message found in ``topic``."""
    from cdc_emitter.kafka.reading import last_messages

    for record in last_messages(servers, topic, 1, config=settings):
        value = record.value or b""
        if len(value) >= 5 and value[0] == 0:
            return int.from_bytes(value[1:5], "big")
    raise SchemaError(
        f"topic {topic!r} has no message with a Confluent header to take a schema id from; "
        "pass --schema-id"
    )


def load_codec(
    path: str | None,
    framing: Literal["confluent", "raw"],
    schema_id: int | None,
    registry: str | None = None,
    servers: str | None = None,
    topic: str | None = None,
    settings: dict | None = None,
    registry_settings: dict | None = None,
) -> Any:
    """The codec from --schema FILE, or from --schema-registry URL (by id; other ids in the
    topic's headers are resolved into that schema)."""
    from cdc_emitter.kafka.registry import SchemaRegistry
    from cdc_emitter.protocol.codec import CdcCodec

    if (path is None) == (registry is None):
        raise click.UsageError("give exactly one of --schema FILE or --schema-registry URL")
    if registry is None and registry_settings:
        raise click.UsageError("--schema-registry-config needs --schema-registry")
    if registry is not None:
        if schema_id is None:
            if framing != "confluent":
                raise click.UsageError("--schema-registry with --framing raw needs --schema-id")
            assert servers is not None and topic is not None  # given with a registry
            schema_id = _topic_schema_id(servers, topic, settings or {})
        source = SchemaRegistry(registry, registry_settings)
        # raw messages name no id: every one is read with the schema of --schema-id
        return CdcCodec(
            source.data_schema(schema_id),
            framing=framing,
            schema_id=schema_id,
            writer_schemas=source.data_schema if framing == "confluent" else None,
        )
    assert path is not None  # exactly one of path and registry
    return CdcCodec(load_data_schema(path), framing=framing, schema_id=schema_id or 0)


# --- the group ------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="cdc-emitter")
def main() -> None:
    """Write changefeeds from Spark into Kafka in the Materialize CDC format, and verify them.

    \b
    Kafka: --bootstrap-servers HOST:PORT (or KAFKA_BOOTSTRAP_SERVERS), librdkafka settings as
    repeated -X key=value. Exit codes: 0 ok, 1 violations (verify) or undecodable messages
    (tail), 2 usage/schema/connection error, 3 not proven (verify: target not reached in time,
    or an empty or incomplete topic).
    """
    # librdkafka's transient complaints (retries, coordinator loading) are not the user's
    # concern: lasting problems surface as `error: ...` with the servers named.
    logging.getLogger("cdc_emitter.kafka.librdkafka").setLevel(logging.ERROR)


# --- verify ---------------------------------------------------------------------------------------


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

    \b
    Exit codes: 0 verified, 1 violations found (takes precedence), 2 usage, schema or
    connection error, 3 not proven: the target was not reached within --timeout, or (without a
    target) the topic is empty or ends with part of its history unproven.

    \b
    Example:
      cdc-emitter verify --bootstrap-servers 127.0.0.1:9092 --topic products \\
          --schema products.avsc --until-frontier 10 --timeout 60 --output products.jsonl
      cdc-emitter verify --topic products --schema products.avsc --engine spark \\
          --conf spark.driver.memory=2g --json
    """
    if until_frontier is not None and until_closed:
        raise click.UsageError("--until-frontier and --until-closed exclude each other")
    if engine == "local" and (spark_packages or spark_conf):
        raise click.UsageError("--packages and --conf are for --engine spark")
    if engine == "spark" and workers is not None:
        raise click.UsageError("--workers is for --engine local (Spark decodes on its executors)")
    from cdc_emitter.read.verify import verify_topic

    servers = require_servers(bootstrap_servers)
    codec = load_codec(
        schema_file,
        framing,
        schema_id,
        schema_registry,
        servers,
        topic,
        kafka_settings,
        registry_settings,
    )
    status = StatusLine()
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
            timeout,
            strict,
            spark_packages,
            spark_conf,
            spark_remote,
        )
        collection = result.collection_rows() if output is not None else None
        history = result.history_rows() if history_file is not None else None
        _verify_report(
            topic, result, codec, timeout, as_json, output, collection, history_file, history
        )
        return

    def on_progress(p) -> None:
        status.show(
            f"{p.messages} messages, {p.updates} updates, frontier "
            f"{frontier_text(p.frontier)}, lag {p.lag} messages"
        )

    def on_warning(text: str) -> None:
        status.done()
        click.echo(f"warning: {text}", err=True)

    try:
        result = verify_topic(
            servers,
            topic,
            codec,
            until_frontier=until_frontier,
            until_closed=until_closed,
            timeout=timeout,
            config=kafka_settings,
            on_progress=on_progress if status.enabled else None,
            on_warning=on_warning,
            keep_collection=output is not None,
            keep_history=history_file is not None,
            strict=strict,
            workers=workers,
            broker_timeout=broker_timeout,
        )
    except KeyboardInterrupt:
        status.done()
        click.echo("interrupted", err=True)
        sys.exit(130)
    finally:
        status.done()

    collection = None
    if output is not None and result.collection is not None:  # kept: keep_collection above
        collection = sorted_collection(result.collection, codec)
    _verify_report(
        topic, result, codec, timeout, as_json, output, collection, history_file, result.history
    )


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
        spark = spark_session("cdc-emitter verify", spark_packages, spark_conf, None, spark_remote)
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
    except KeyboardInterrupt:
        status.done()
        click.echo("interrupted", err=True)
        sys.exit(130)
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


# --- tail -----------------------------------------------------------------------------------------


@main.command()
@kafka_options
@click.option("--topic", required=True, help="The topic to print.")
@codec_options
@click.option("--follow", "-f", is_flag=True, help="Keep printing new messages (until Ctrl-C).")
@click.option(
    "--max-messages", type=click.IntRange(min=0), metavar="N", help="Stop after N messages."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="S",
    help="Stop after S seconds (with --follow; without it, give up reading).",
)
@handle_errors
def tail(
    bootstrap_servers,
    kafka_settings,
    broker_timeout,
    topic,
    schema_file,
    schema_registry,
    registry_settings,
    framing,
    schema_id,
    follow,
    max_messages,
    timeout,
):
    """Print a CDC topic's messages as Avro-JSON lines, from the beginning.

    One line per message in the notation of the Materialize documentation:
    {"array":[...]} for update statements, {"com.materialize.cdc.progress":{...}} for progress
    statements. Partitions are read in offset order each (interleaved between partitions).
    A message that cannot be decoded is reported on stderr (exit code 1 at the end).

    \b
    Example:
      cdc-emitter tail --bootstrap-servers 127.0.0.1:9092 --topic products --schema products.avsc
      {"array":[{"data":{"id":5,"price":{"int":10}},"time":5,"diff":1}]}
      {"com.materialize.cdc.progress":{"lower":[0],"upper":[3],"counts":[]}}
    """
    from cdc_emitter.errors import DecodeError
    from cdc_emitter.kafka.reading import read_topic

    servers = require_servers(bootstrap_servers)
    codec = load_codec(
        schema_file,
        framing,
        schema_id,
        schema_registry,
        servers,
        topic,
        kafka_settings,
        registry_settings,
    )
    if max_messages == 0:
        sys.exit(EXIT_OK)
    printed = bad = 0
    try:
        for record in read_topic(
            servers,
            topic,
            config=kafka_settings,
            timeout=timeout,
            stop_at_end=not follow,
            poll_timeout=0.5,
            broker_timeout=broker_timeout,
        ):
            try:
                if record.value is None:
                    raise DecodeError("the message has no value (a tombstone)")
                line = codec.to_avro_json(record.value)
            except DecodeError as exc:
                bad += 1
                click.echo(
                    f"undecodable message at partition {record.partition} offset "
                    f"{record.offset}: {exc}",
                    err=True,
                )
            else:
                click.echo(line)
                if follow:
                    sys.stdout.flush()
            printed += 1
            if max_messages is not None and printed >= max_messages:
                break
    except KeyboardInterrupt:
        pass
    sys.exit(EXIT_VIOLATIONS if bad else EXIT_OK)


# --- schema ---------------------------------------------------------------------------------------


@main.command()
@click.option(
    "--columns",
    metavar="DDL",
    help='The table\'s columns as a Spark DDL string, e.g. "id long not null, price int".',
)
@click.option(
    "--from", "source", metavar="SOURCE", help="Take the columns from a table read by Spark."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="parquet",
    show_default=True,
    help="Format of --from.",
)
@click.option(
    "-O",
    "read_options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_parse_settings,
    help="A Spark reader option for --from (repeatable), e.g. -O header=true.",
)
@click.option(
    "--data-schema",
    "data_schema_file",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="An Avro data record schema (or a full CDC union schema) file.",
)
@click.option(
    "--sql",
    is_flag=True,
    help="Print the Materialize CREATE SOURCE statement instead of the schema.",
)
@click.option("--topic", help="The topic, for --sql.")
@click.option(
    "--name",
    "source_name",
    metavar="NAME",
    help="The Materialize source name, for --sql (default: the topic name).",
)
@click.option(
    "--bootstrap-servers",
    envvar=ENV_BOOTSTRAP,
    metavar="HOST:PORT",
    show_envvar=True,
    help="The broker Materialize connects to, for --sql.",
)
@click.option(
    "--schema-registry",
    metavar="URL",
    help="For --sql: Materialize takes the schema from this Confluent schema registry "
    "(FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY), where a sink or export given the same "
    "registry registered it.",
)
@spark_options
@handle_errors
def schema(
    columns,
    source,
    fmt,
    read_options,
    data_schema_file,
    sql,
    topic,
    source_name,
    bootstrap_servers,
    schema_registry,
    spark_packages,
    spark_conf,
    spark_remote,
):
    """Print the CDC Avro schema for a table, or the Materialize statement reading its topic.

    Give the table's columns in exactly one way: --columns (a Spark DDL string), --from
    (a table read by Spark; its schema only, no rows), or --data-schema (an Avro file).
    Without --sql it prints the full union schema (pretty JSON, ready for --schema of the
    other commands); with --sql it prints the Materialize statement
    CREATE SOURCE ... FORMAT AVRO USING SCHEMA '...' ENVELOPE MATERIALIZE for --topic.

    \b
    Examples:
      cdc-emitter schema --columns "id long not null, price int" > products.avsc
      cdc-emitter schema --data-schema products.avsc --sql --topic products \\
          --bootstrap-servers kafka:9092
    """
    given = [x for x in (columns, source, data_schema_file) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --columns, --from or --data-schema")
    if sql and not topic:
        raise click.UsageError("--sql needs --topic")
    if schema_registry and not sql:
        raise click.UsageError("--schema-registry is for --sql")
    if sql:
        servers = require_servers(bootstrap_servers)
    from cdc_emitter.protocol.codec import union_schema
    from cdc_emitter.spark.schema import data_schema as spark_to_avro

    if data_schema_file is not None:
        data_schema = load_data_schema(data_schema_file)
    elif columns is not None:
        data_schema = spark_to_avro(columns_struct(columns))
    else:
        spark = spark_session("cdc-emitter schema", spark_packages, spark_conf, fmt, spark_remote)
        data_schema = spark_to_avro(read_table(spark, source, fmt, read_options).schema)
    union = union_schema(data_schema)
    if sql:
        from cdc_emitter.kafka.registry import safe_url

        click.echo(
            create_source_sql(
                source_name or default_source_name(topic),
                servers,
                topic,
                union,
                None if schema_registry is None else safe_url(schema_registry),
            )
        )
    else:
        click.echo(json.dumps(union, indent=2, ensure_ascii=False))


# --- export ---------------------------------------------------------------------------------------


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
    help="With --from-topic: the topic's Avro schema file (the union or the data record).",
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
    callback=_parse_settings,
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
    SOURCE +1, rows of SOURCE2 -1, so unchanged rows cancel. The updates are followed by the
    progress statement that covers them, starting from the topic's current frontier, so the
    progress chain stays gapless; --close ends the history (upper: []).

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
    or when a row's multiplicity is negative (exit 2).

    \b
      cdc-emitter export --from-topic products --schema products.avsc --to products_v2.parquet
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
    status = StatusLine()
    status.show(f"starting Spark to read {source}")
    try:
        spark = spark_session("cdc-emitter export", spark_packages, spark_conf, fmt, spark_remote)
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
        )
        written = sink.write(df, time=at_time, close=close)
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
    if destination is None or schema_file is None:
        raise click.UsageError("--from-topic needs --to PATH and --schema FILE")
    if fmt in ("jdbc", "table", "text"):
        raise click.UsageError(f"--from-topic writes files: --format {fmt} is not one of them")
    servers = require_servers(bootstrap_servers)
    data_schema = load_data_schema(schema_file)
    status = StatusLine()
    from cdc_emitter.read.spark_reader import read_cdc

    status.show(f"starting Spark to read topic {topic}")
    try:
        spark = spark_session("cdc-emitter export", spark_packages, spark_conf, fmt, spark_remote)
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
        status.show(f"writing the table of topic {topic} to {destination}")
        try:
            rows.write.format(fmt).options(**write_options).mode(
                "errorifexists" if mode == "error" else "overwrite"
            ).save(destination)
        except Exception as exc:  # noqa: BLE001 - Spark's own cause, not a traceback
            raise ConfigError(
                f"cannot write {fmt} table {destination}: {spark_error_text(exc)}"
            ) from exc
    finally:
        status.done()
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
