"""The options several commands share (Kafka, codec, schema registry, Spark), and what they
resolve to: the bootstrap servers, the data schema, the codec."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from cdc_emitter.errors import ConfigError, SchemaError
from cdc_emitter.protocol.schemas import Framing

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"


def parse_settings(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
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
    """As `parse_settings`, and ``@FILE``: the ``key=value`` lines of a properties file
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
    return parse_settings(ctx, param, tuple(items))


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
        callback=parse_settings,
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
        "(default: the schema the sink wrote into the topic's progress statements).",
    )(func)
    return func


def _remember_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_root().meta[VERBOSE] = True
        logging.getLogger("cdc_emitter.kafka.librdkafka").setLevel(logging.WARNING)


VERBOSE = "cdc_emitter.verbose"


def start_spark(
    app: str,
    packages: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
    fmt: str | None = None,
    remote: str | None = None,
) -> Any:
    """`spark_session` for a command: quiet (Spark's own output into a log file) unless the
    command was given --verbose."""
    from cdc_emitter.spark.session import spark_session

    ctx = click.get_current_context(silent=True)
    verbose = bool(ctx is not None and ctx.find_root().meta.get(VERBOSE))
    return spark_session(app, packages, conf, fmt, remote, verbose=verbose)


def check_inputs(
    paths: Sequence[str | None],
    fmt: str,
    remote: str | None,
    conf: Mapping[str, str] | None,
    options: Mapping[str, str] | None = None,
) -> None:
    """Local input paths checked before Spark starts: missing, empty, or another format (read
    with the reader ``options``, whose ``encoding`` says how text is encoded)."""
    from cdc_emitter.spark.sources import check_source

    for path in paths:
        if path is not None:
            check_source(path, fmt, remote=remote, conf=conf, options=options)


def spark_options(func: Callable) -> Callable:
    """--remote, --packages, --conf and --verbose: which Spark export, schema --from and verify
    --engine spark run on, what it loads, and whether its own output is shown."""
    func = click.option(
        "--verbose",
        "-v",
        is_flag=True,
        expose_value=False,
        callback=_remember_verbose,
        help="Show Spark's own output (package downloads, warnings, progress bars) and "
        "librdkafka's warnings; by default Spark's go to a log file named only when it fails.",
    )(func)
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
        callback=parse_settings,
        help="A Spark setting (repeatable), e.g. --conf spark.driver.memory=4g.",
    )(func)
    func = click.option(
        "--packages",
        "spark_packages",
        multiple=True,
        metavar="COORDS",
        callback=_split_packages,
        help="Maven coordinates of jars Spark should load (repeatable or comma-separated), e.g. "
        "a JDBC driver, or Delta Lake for export and schema of a Delta table (convert and apply "
        "add the Delta Lake build for this Spark themselves).",
    )(func)
    return func


def _split_packages(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> list[str]:
    """Repeated and comma-separated --packages as one list of Maven coordinates."""
    return [c.strip() for item in values for c in item.split(",") if c.strip()]


def require_servers(bootstrap_servers: str | None) -> str:
    """The bootstrap servers given, stripped; a ConfigError that says how to give them if none."""
    if not bootstrap_servers or not bootstrap_servers.strip():
        raise ConfigError(
            f"no Kafka bootstrap servers given: pass --bootstrap-servers HOST:PORT or set {ENV_BOOTSTRAP}"
        )
    return bootstrap_servers.strip()


def check_kafka(
    servers: str,
    settings: dict | None,
    broker_timeout: float,
    topic: str | None = None,
    *,
    require_topic: bool = False,
    reading: bool = False,
) -> int | None:
    """The command's first question to Kafka, before Spark or any real work: the -X settings,
    the topic's name, a cluster that answers and accepts us (and with ``require_topic`` the
    topic), each answered in seconds. Returns the topic's partitions, None if it is missing."""
    from cdc_emitter.kafka.preflight import PREFLIGHT_TIMEOUT, check_cluster

    return check_cluster(
        servers,
        settings or None,
        topic=topic,
        require_topic=require_topic,
        reading=reading,
        timeout=min(broker_timeout, PREFLIGHT_TIMEOUT),
    )


def load_data_schema(path: str) -> dict:
    """The data record schema from a schema file (full union schema or data record schema)."""
    from cdc_emitter.protocol.schemas import data_schema_from_text

    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return data_schema_from_text(text)
    except SchemaError as exc:
        raise SchemaError(f"schema file {path}: {exc}") from exc
    except ValueError as exc:  # defensive: malformed JSON not wrapped by the codec
        raise SchemaError(f"schema file {path}: not a usable Avro schema: {exc}") from exc


def _topic_schema_id(servers: str, topic: str, settings: dict) -> int:
    """The schema id in the Confluent header of the newest message at the end of ``topic``."""
    from cdc_emitter.kafka.registry import newest_schema_id

    schema_id = newest_schema_id(servers, topic, settings)
    if schema_id is None:
        raise SchemaError(
            f"topic {topic!r} has no message with a Confluent header to take a schema id from; "
            "pass --schema-id"
        )
    return schema_id


#: what a reader without a schema file or registry is told when the topic names no schema
NO_SCHEMA_HINT = "pass --schema FILE or --schema-registry URL"


def reader_data_schema(
    path: str | None,
    servers: str,
    topic: str,
    settings: dict | None = None,
    broker_timeout: float | None = None,
    *,
    hint: str = NO_SCHEMA_HINT,
    wait: float = 0.0,
) -> dict:
    """The data schema to read ``topic`` with: --schema FILE's, or else the one the sink wrote
    into the header of the topic's newest progress statement.

    A schema file is checked against that header when the topic has one: a file that does not
    read the data as written (other columns, types, nullability or order) is refused, naming the
    columns, rather than decoded into what would look like protocol violations.

    Args:
        path: The --schema file, or None.
        servers: The bootstrap servers.
        topic: The topic to read.
        settings: librdkafka settings (-X).
        broker_timeout: Seconds to wait for a broker that does not answer (--broker-timeout).
        hint: What to pass instead, said when the topic names no schema.
        wait: Seconds to wait (no file) for a first statement when the topic has no message
            yet: a command that follows a topic may start before its writer (``math.inf``: as
            long as it takes). A topic with messages but no schema header is another writer's:
            it is not waited on.

    Returns:
        The data record schema.

    Raises:
        NoSchemaYet: No progress statement of the topic carries the schema header (within
            ``wait``); it is a SchemaError.
        SchemaError: The file is no usable schema or differs from the topic's.
        BrokerError: The topic does not exist or the broker cannot be reached.
    """
    from cdc_emitter.kafka.config import BROKER_TIMEOUT
    from cdc_emitter.kafka.reading import last_messages
    from cdc_emitter.kafka.topic_schema import writer_schema
    from cdc_emitter.protocol.headers import HEADER_SCHEMA
    from cdc_emitter.protocol.schema_match import column_differences

    if path is not None:
        given = load_data_schema(path)  # a bad file is said before the topic is read
        patience = BROKER_TIMEOUT if broker_timeout is None else broker_timeout
        written = writer_schema(servers, topic, settings, timeout=patience, full_scan=False)
        differences = [] if written is None else column_differences(given, written)
        if differences:
            raise SchemaError(
                f"--schema {path} differs from the schema topic {topic!r} was written with: "
                f"{', '.join(differences)}; drop --schema to read with the writer's schema"
            )
        return given
    patience = BROKER_TIMEOUT if broker_timeout is None else broker_timeout
    deadline = time.monotonic() + wait
    written = writer_schema(servers, topic, settings, timeout=patience)
    # messages, and none names its schema: another writer's topic, not a late one (no wait)
    late = written is None and wait > 0 and not last_messages(servers, topic, 1, settings, patience)
    while written is None and late and time.monotonic() < deadline:
        time.sleep(min(SCHEMA_POLL, max(0.0, deadline - time.monotonic())))
        written = writer_schema(servers, topic, settings, timeout=patience, full_scan=False)
    if written is None:
        within = f" within {wait:g}s" if late else ""
        raise (NoSchemaYet if late else SchemaError)(
            f"topic {topic!r} has no progress statement with a {HEADER_SCHEMA} header{within} "
            f"to take the schema from; {hint}"
        )
    return written


#: Seconds between two looks for a topic's first progress statement.
SCHEMA_POLL = 0.5


class NoSchemaYet(SchemaError):
    """The topic has no progress statement carrying the writer's schema (yet)."""


def check_schema_options(
    path: str | None,
    registry: str | None,
    registry_settings: dict | None,
    framing: str = "confluent",
    schema_id: int | None = None,
) -> None:
    """Usage errors for a reader's --schema, --schema-registry and --schema-registry-config
    that exclude each other, and a --schema file that is no usable schema: said before Kafka is
    asked anything."""
    if path is not None and registry is not None:
        raise click.UsageError("--schema and --schema-registry exclude each other")
    if registry is None and registry_settings:
        raise click.UsageError("--schema-registry-config needs --schema-registry")
    if registry is not None and schema_id is None and framing != "confluent":
        raise click.UsageError("--schema-registry with --framing raw needs --schema-id")
    if path is not None:
        load_data_schema(path)


def load_codec(
    path: str | None,
    framing: Framing,
    schema_id: int | None,
    registry: str | None = None,
    servers: str | None = None,
    topic: str | None = None,
    settings: dict | None = None,
    registry_settings: dict | None = None,
    broker_timeout: float | None = None,
    wait_for_schema: float = 0.0,
) -> Any:
    """The codec from --schema FILE, or from --schema-registry URL (by id; other ids in the
    topic's headers are resolved into that schema), or without either from the schema the sink
    wrote into the topic's progress statements (`reader_data_schema`)."""
    from cdc_emitter.kafka.registry import SchemaRegistry
    from cdc_emitter.protocol.codec import CdcCodec

    check_schema_options(path, registry, registry_settings)
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
    assert servers is not None and topic is not None  # a reader's: it names both
    data_schema = reader_data_schema(
        path, servers, topic, settings, broker_timeout, wait=wait_for_schema
    )
    return CdcCodec(data_schema, framing=framing, schema_id=schema_id or 0)


def open_reader(
    bootstrap_servers: str | None,
    topic: str,
    settings: dict,
    broker_timeout: float,
    schema_file: str | None,
    framing: Framing,
    schema_id: int | None,
    registry: str | None,
    registry_settings: dict | None,
    wait_for_schema: float = 0.0,
) -> tuple[str, Any]:
    """What every reading command (verify, tail) does first, in this order: the servers given,
    the schema options' usage, Kafka's first answer (`check_kafka`), then the codec
    (`load_codec`, which waits up to ``wait_for_schema`` seconds for a first progress statement
    when the schema comes from the topic). Returns ``(servers, codec)``; each failure is the
    one-line error of its step.
    """
    servers = require_servers(bootstrap_servers)
    check_schema_options(schema_file, registry, registry_settings, framing, schema_id)
    check_kafka(servers, settings, broker_timeout, topic)
    codec = load_codec(
        schema_file,
        framing,
        schema_id,
        registry,
        servers,
        topic,
        settings,
        registry_settings,
        broker_timeout,
        wait_for_schema,
    )
    return servers, codec


def with_delta_package(spark_packages: Sequence[str], spark_remote: str | None) -> list[str]:
    """--packages, and the Delta Lake build for this Spark unless one is named (a Spark Connect
    server loads its own): what a command that reads or writes Delta tables loads."""
    packages = list(spark_packages)
    if not spark_remote and not any(c.startswith("io.delta:") for c in packages):
        import pyspark

        from cdc_emitter.spark.session import delta_package

        package = delta_package(pyspark.__version__)
        packages += [package] if package else []
    return packages
