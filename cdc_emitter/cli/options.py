"""The options several commands share (Kafka, codec, schema registry, Spark), and what they
resolve to: the bootstrap servers, the data schema, the codec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import click

from cdc_emitter.errors import ConfigError, SchemaError

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
        "the Delta Lake package for --format delta or a JDBC driver for --format jdbc.",
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
    """The schema id in the Confluent header of the newest message at the end of ``topic``."""
    from cdc_emitter.kafka.registry import newest_schema_id

    schema_id = newest_schema_id(servers, topic, settings)
    if schema_id is None:
        raise SchemaError(
            f"topic {topic!r} has no message with a Confluent header to take a schema id from; "
            "pass --schema-id"
        )
    return schema_id


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
