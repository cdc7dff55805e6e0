"""The ``cdc-emitter`` command line: verify, tail, schema, export.

Exit codes (every command): 0 success; 2 usage, schema, configuration or connection error
(printed as ``error: ...`` on stderr, never a traceback). ``verify`` adds 1 (protocol violations,
takes precedence) and 3 (the target frontier was not reached in time); ``tail`` exits 1 when a
message could not be decoded.

Spark is imported only by the commands that need it (``export``, ``schema --columns/--from``),
so ``verify`` and ``tail`` start fast and run where no JVM is installed.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from . import __version__
from .errors import CdcError, ConfigError, SchemaError

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"

EXIT_OK, EXIT_VIOLATIONS, EXIT_ERROR, EXIT_NOT_REACHED = 0, 1, 2, 3


# --- shared option machinery --------------------------------------------------------------------


def _parse_settings(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    """``key=value`` strings into a dict; a bad one is a usage error naming it (secrets masked)."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            shown = f"{key}=***" if sep else item  # never echo a value
            raise click.BadParameter(f"{shown!r} is not of the form key=value", ctx=ctx, param=param)
        out[key] = value
    return out


def kafka_options(func: Callable) -> Callable:
    """--bootstrap-servers and repeated -X key=value (librdkafka settings)."""
    func = click.option(
        "-X", "kafka_settings", multiple=True, metavar="KEY=VALUE", callback=_parse_settings,
        help="A librdkafka setting, e.g. -X security.protocol=SASL_SSL (repeatable). "
        "Values are never echoed in messages.",
    )(func)
    func = click.option(
        "--bootstrap-servers", envvar=ENV_BOOTSTRAP, metavar="HOST:PORT", show_envvar=True,
        help="Kafka bootstrap servers (comma-separated).",
    )(func)
    return func


def codec_options(func: Callable) -> Callable:
    """--schema FILE, --framing, --schema-id."""
    func = click.option(
        "--schema-id", type=click.IntRange(0, 2**31 - 1), default=None,
        help="Schema id in the Confluent header (confluent framing; default 0, or with "
        "--schema-registry the id found in the topic).",
    )(func)
    func = click.option(
        "--framing", type=click.Choice(["confluent", "raw"]), default="confluent", show_default=True,
        help="confluent: a 0x00 byte and a 4-byte schema id before the Avro body; raw: none.",
    )(func)
    func = click.option(
        "--schema-registry", metavar="URL",
        help="Take the writer schema from this Confluent schema registry, by --schema-id "
        "(default: the id in the header of the topic's first message), instead of --schema.",
    )(func)
    func = click.option(
        "--schema", "schema_file", type=click.Path(exists=True, dir_okay=False, readable=True),
        help="Avro schema file: the full CDC union schema or just the `data` record schema "
        "(required unless --schema-registry).",
    )(func)
    return func


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


def _servers(bootstrap_servers: str | None) -> str:
    if not bootstrap_servers or not bootstrap_servers.strip():
        raise ConfigError(
            f"no Kafka bootstrap servers given: pass --bootstrap-servers HOST:PORT or set {ENV_BOOTSTRAP}"
        )
    return bootstrap_servers.strip()


def load_data_schema(path: str) -> dict:
    """The data record schema from a schema file (full union schema or data record schema)."""
    from .codec import data_schema_from_text

    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        return data_schema_from_text(text)
    except SchemaError as exc:
        raise SchemaError(f"schema file {path}: {exc}") from exc
    except ValueError as exc:  # defensive: malformed JSON not wrapped by the codec
        raise SchemaError(f"schema file {path}: not a usable Avro schema: {exc}") from exc


def fetch_registry_schema(url: str, schema_id: int, timeout: float = 10.0) -> str:
    """The schema text registered under ``schema_id`` in a Confluent schema registry."""
    import urllib.error
    import urllib.request

    endpoint = f"{url.rstrip('/')}/schemas/ids/{schema_id}"
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as resp:
            body = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise SchemaError(f"schema registry {url} has no schema id {schema_id} (HTTP {exc.code})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(f"cannot reach the schema registry at {url}: {reason}") from None
    except ValueError as exc:
        raise SchemaError(f"schema registry {url}: schema id {schema_id}: not JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise SchemaError(f"schema registry {url}: schema id {schema_id}: no 'schema' in the answer")
    return body["schema"]


def _topic_schema_id(servers: str, topic: str, settings: dict) -> int:
    """The schema id in the Confluent header of the first message found in ``topic``."""
    from .kafka_io import last_messages

    for record in last_messages(servers, topic, 1, config=settings):
        value = record.value or b""
        if len(value) >= 5 and value[0] == 0:
            return int.from_bytes(value[1:5], "big")
    raise SchemaError(
        f"topic {topic!r} has no message with a Confluent header to take a schema id from; "
        "pass --schema-id"
    )


def load_codec(path: str | None, framing: str, schema_id: int | None, registry: str | None = None,
               servers: str | None = None, topic: str | None = None,
               settings: dict | None = None) -> Any:
    """The codec from --schema FILE, or from --schema-registry URL (by id)."""
    from .codec import CdcCodec, data_schema_from_text

    if (path is None) == (registry is None):
        raise click.UsageError("give exactly one of --schema FILE or --schema-registry URL")
    if registry is not None:
        if schema_id is None:
            if framing != "confluent":
                raise click.UsageError("--schema-registry with --framing raw needs --schema-id")
            schema_id = _topic_schema_id(servers, topic, settings or {})
        text = fetch_registry_schema(registry, schema_id)
        try:
            data_schema = data_schema_from_text(text)
        except SchemaError as exc:
            raise SchemaError(f"schema registry {registry}: schema id {schema_id}: {exc}") from None
    else:
        data_schema = load_data_schema(path)
    return CdcCodec(data_schema, framing=framing, schema_id=schema_id or 0)


def _frontier_text(frontier: tuple[int, ...]) -> str:
    return "[] (closed)" if frontier == () else f"[{frontier[0]}]"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Progress:
    """One rewritten status line on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            click.echo(f"\r\x1b[K{text}", err=True, nl=False)
            self.shown = True

    def done(self) -> None:
        if self.shown:
            click.echo("", err=True)
            self.shown = False


# --- the group ------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="cdc-emitter")
def main() -> None:
    """Write changefeeds from Spark into Kafka in the Materialize CDC format, and verify them.

    \b
    Kafka: --bootstrap-servers HOST:PORT (or KAFKA_BOOTSTRAP_SERVERS), librdkafka settings as
    repeated -X key=value. Exit codes: 0 ok, 1 violations (verify) or undecodable messages
    (tail), 2 usage/schema/connection error, 3 target frontier not reached in time (verify).
    """
    # librdkafka's transient complaints (retries, coordinator loading) are not the user's
    # concern: lasting problems surface as `error: ...` with the servers named.
    logging.getLogger("cdc_emitter.kafka_io.librdkafka").setLevel(logging.ERROR)


# --- verify ---------------------------------------------------------------------------------------


@main.command()
@kafka_options
@click.option("--topic", required=True, help="The topic to verify.")
@codec_options
@click.option("--until-frontier", type=click.IntRange(min=0), metavar="N",
              help="Follow the topic until every time < N is complete (frontier >= [N] or closed).")
@click.option("--until-closed", is_flag=True, help="Follow the topic until the history is closed.")
@click.option("--timeout", type=click.FloatRange(min=0), metavar="S",
              help="Give up after S seconds (exit 3 if the target was not reached).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object.")
@click.option("--output", type=click.Path(dir_okay=False, allow_dash=True), metavar="FILE",
              help="Write the collection at the frontier as JSON lines {\"data\": ..., \"count\": n}.")
@click.option("--history", "history_file", type=click.Path(dir_okay=False, allow_dash=True),
              metavar="FILE",
              help="Write the reconstructed updates in time order as JSON lines "
              "{\"data\": ..., \"time\": t, \"diff\": d}.")
@handle_errors
def verify(bootstrap_servers, kafka_settings, topic, schema_file, schema_registry, framing,
           schema_id, until_frontier, until_closed, timeout, as_json, output, history_file):
    """Read a CDC topic from the beginning and prove it exact.

    Reads every partition from offset 0 (no consumer group, nothing committed), removes
    duplicates, restores order, checks every progress statement and reports each protocol
    violation (conflicting diffs, over-counts, disagreeing progress, counts outside their
    interval, negative times or counts, undecodable messages with partition and offset).

    Without --until-frontier/--until-closed it verifies what the topic holds now; with one it
    follows the topic until the target frontier is reached (or --timeout expires).

    \b
    Exit codes: 0 verified, 1 violations found (takes precedence), 2 usage, schema or
    connection error, 3 the target frontier was not reached within --timeout.

    \b
    Example:
      cdc-emitter verify --bootstrap-servers 127.0.0.1:9092 --topic products \\
          --schema products.avsc --until-frontier 10 --timeout 60 --output products.jsonl
    """
    if until_frontier is not None and until_closed:
        raise click.UsageError("--until-frontier and --until-closed exclude each other")
    from .verify import verify_topic

    servers = _servers(bootstrap_servers)
    codec = load_codec(schema_file, framing, schema_id, schema_registry, servers, topic,
                       kafka_settings)
    status = _Progress()

    def on_progress(p) -> None:
        status.show(f"{p.messages} messages, {p.updates} updates, frontier "
                    f"{_frontier_text(p.frontier)}, lag {p.lag} messages")

    try:
        result = verify_topic(
            servers, topic, codec, until_frontier=until_frontier, until_closed=until_closed,
            timeout=timeout, config=kafka_settings,
            on_progress=on_progress if status.enabled else None,
            keep_collection=output is not None, keep_history=history_file is not None,
        )
    except KeyboardInterrupt:
        status.done()
        click.echo("interrupted", err=True)
        sys.exit(130)
    finally:
        status.done()

    if output is not None:
        with click.open_file(output, "w", encoding="utf-8") as fh:
            for data, count in sorted(result.collection.items(), key=lambda kv: codec.sort_key(kv[0])):
                fh.write(_dumps({"data": codec.data_to_json(data), "count": count}) + "\n")
    if history_file is not None:
        with click.open_file(history_file, "w", encoding="utf-8") as fh:
            for data, time, diff in result.history:
                fh.write(_dumps({"data": codec.data_to_json(data), "time": time, "diff": diff}) + "\n")

    if result.violations:
        code = EXIT_VIOLATIONS
    elif not result.reached:
        code = EXIT_NOT_REACHED
    else:
        code = EXIT_OK
    if as_json:
        click.echo(_dumps(result.summary()))
    else:
        click.echo(_human_summary(topic, result, timeout))
    sys.exit(code)


def _human_summary(topic: str, result: Any, timeout: float | None) -> str:
    lines = []
    frontier = _frontier_text(result.frontier)
    within = "in time" if timeout is None else f"within {timeout:g}s"
    if result.target is None:
        where = "end of topic read" if result.reached else f"end of topic NOT read {within}"
    else:
        target = _frontier_text(result.target)
        where = f"target {target} reached" if result.reached else f"target {target} NOT reached {within}"
    lines.append(f"topic {topic}: frontier {frontier}, {where}")
    lines.append(f"{result.messages} messages, {result.updates} updates, "
                 f"{result.duplicates} duplicates dropped")
    if result.violations:
        lines.append(f"{len(result.violations)} violations:")
        for v in result.violations:
            at = [] if v.time is None else [f"at time {v.time}"]
            if v.partition is not None:
                at.append(f"(partition {v.partition}, offset {v.offset})")
            lines.append("  " + " ".join([v.kind, *at]) + f": {v.detail}")
        lines.append("FAILED: protocol violations")
    elif not result.reached:
        lines.append("NOT VERIFIED: the target was not reached in time")
    else:
        lines.append("verified: no violations")
    return "\n".join(lines)


# --- tail -----------------------------------------------------------------------------------------


@main.command()
@kafka_options
@click.option("--topic", required=True, help="The topic to print.")
@codec_options
@click.option("--follow", "-f", is_flag=True, help="Keep printing new messages (until Ctrl-C).")
@click.option("--max-messages", type=click.IntRange(min=0), metavar="N",
              help="Stop after N messages.")
@click.option("--timeout", type=click.FloatRange(min=0), metavar="S",
              help="Stop after S seconds (with --follow; without it, give up reading).")
@handle_errors
def tail(bootstrap_servers, kafka_settings, topic, schema_file, schema_registry, framing, schema_id,
         follow, max_messages, timeout):
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
    from .errors import DecodeError
    from .kafka_io import read_topic

    servers = _servers(bootstrap_servers)
    codec = load_codec(schema_file, framing, schema_id, schema_registry, servers, topic,
                       kafka_settings)
    if max_messages == 0:
        sys.exit(EXIT_OK)
    printed = bad = 0
    try:
        for record in read_topic(servers, topic, config=kafka_settings, timeout=timeout,
                                 stop_at_end=not follow, poll_timeout=0.5):
            try:
                if record.value is None:
                    raise DecodeError("the message has no value (a tombstone)")
                line = codec.to_avro_json(record.value)
            except DecodeError as exc:
                bad += 1
                click.echo(f"undecodable message at partition {record.partition} offset "
                           f"{record.offset}: {exc}", err=True)
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


def _source_name(topic: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", topic)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


def _sql_identifier(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_source_sql(name: str, bootstrap_servers: str, topic: str, union: list) -> str:
    """The Materialize statement that reads ``topic`` with the CDC ``union`` schema."""
    schema = json.dumps(union, separators=(",", ":"), ensure_ascii=False)
    return (
        f"CREATE SOURCE {_sql_identifier(name)}\n"
        f"FROM KAFKA BROKER {_sql_string(bootstrap_servers)} TOPIC {_sql_string(topic)}\n"
        f"FORMAT AVRO USING SCHEMA {_sql_string(schema)}\n"
        f"ENVELOPE MATERIALIZE;"
    )


def spark_options(func: Callable) -> Callable:
    """--packages and --conf: what the Spark session of export / schema --from loads."""
    func = click.option(
        "--conf", "spark_conf", multiple=True, metavar="KEY=VALUE", callback=_parse_settings,
        help="A Spark setting (repeatable), e.g. --conf spark.driver.memory=4g.",
    )(func)
    func = click.option(
        "--packages", "spark_packages", multiple=True, metavar="COORDS", callback=_split_packages,
        help="Maven coordinates of jars Spark should load (repeatable or comma-separated), e.g. "
        "the Delta Lake package for --format delta or a JDBC driver for --format jdbc.",
    )(func)
    return func


def _split_packages(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    """Repeated and comma-separated --packages as one list of Maven coordinates."""
    return [c.strip() for item in values for c in item.split(",") if c.strip()]


def _spark(app: str, packages: Sequence[str] = (), conf: dict | None = None, fmt: str | None = None) -> Any:
    """A Spark session loading ``packages``, with ``conf`` and the settings reading ``fmt`` needs."""
    import os

    # executors run Python (the sink encodes there): the interpreter this CLI runs in
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if sys.stderr.isatty() else "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if packages:
        builder = builder.config("spark.jars.packages", ",".join(packages))
    for key, value in _reader_conf(fmt, packages, conf).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - e.g. a package Maven Central does not have
        raise ConfigError(f"cannot start Spark: {_spark_error_text(exc)}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _spark_error_text(exc: BaseException) -> str:
    """The first line of what Spark says: the Java exception behind a Py4J error, if any."""
    java = getattr(exc, "java_exception", None)
    text = ""
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone
            text = ""
    text = (text or str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def _reader_conf(fmt: str | None, packages: Sequence[str], conf: dict | None) -> dict:
    """Spark settings for reading ``fmt``: Delta's extension and catalog when its package is
    loaded (Delta refuses to read without them); the user's --conf wins."""
    out = dict(conf or {})
    if fmt == "delta" and any(c.startswith("io.delta:") for c in packages):
        for key, value in _DELTA_CONF.items():
            out.setdefault(key, value)
    return out


#: The Delta Lake package built for each Spark major.minor version (the one --format delta needs).
DELTA_PACKAGES = {
    "3.5": "io.delta:delta-spark_2.12:3.3.2",
    "4.0": "io.delta:delta-spark_2.13:4.0.0",
    "4.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
}

_SOURCE_HINTS = {
    "delta": "Spark has no Delta Lake reader loaded: add --packages {delta}",
    "jdbc": "Spark needs the database's JDBC driver: add --packages with the driver's Maven "
            "coordinates (e.g. org.postgresql:postgresql:42.7.4), -O driver=CLASS (e.g. "
            "org.postgresql.Driver) and -O url=jdbc:...",
}


def _spark_to_avro(struct: Any) -> dict:
    from .spark_schema import data_schema

    return data_schema(struct)


def _read_table(spark: Any, source: str, fmt: str, options: dict) -> Any:
    """A DataFrame for SOURCE; errors reading it become CdcError (exit 2, no traceback)."""
    try:
        if fmt == "table":
            return spark.read.options(**options).table(source)
        if fmt == "jdbc":
            opts = dict(options)
            opts.setdefault("dbtable", source)
            return spark.read.format("jdbc").options(**opts).load()
        return spark.read.format(fmt).options(**options).load(source)
    except Exception as exc:  # noqa: BLE001 - Spark raises many types; all mean "cannot read"
        text = _spark_error_text(exc)
        missing = ("DATA_SOURCE_NOT_FOUND", "No suitable driver", "ClassNotFoundException")
        hint = _SOURCE_HINTS.get(fmt) if any(m in text for m in missing) else None
        if hint is not None:
            version = ".".join(spark.version.split(".")[:2])
            hint = hint.format(delta=DELTA_PACKAGES.get(
                version, f"with the Delta Lake package built for Spark {spark.version}"))
        raise ConfigError(f"cannot read {fmt} source {source!r}: {text}"
                          + (f"\n{hint}" if hint else "")) from exc


# A pure parser for the Spark DDL column lists `schema --columns` takes, so that the common case
# needs no JVM; anything it does not know falls back to Spark's own parser.

_DDL_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('(?:[^'\\]|\\.)*')|(.))")
_SIMPLE_TYPES = {
    "boolean": "BooleanType", "tinyint": "ByteType", "byte": "ByteType",
    "smallint": "ShortType", "short": "ShortType", "int": "IntegerType", "integer": "IntegerType",
    "bigint": "LongType", "long": "LongType", "float": "FloatType", "real": "FloatType",
    "double": "DoubleType", "string": "StringType", "binary": "BinaryType", "date": "DateType",
    "timestamp": "TimestampType", "timestamp_ltz": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
}


class _DdlUnknown(Exception):
    """Syntax the pure parser does not handle: let Spark parse it."""


def _ddl_tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _DDL_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise _DdlUnknown(text[pos:])
        pos = m.end()
        out.append(m.group(0).strip())
    return [t for t in out if t]


def parse_ddl_columns(text: str) -> Any:
    """``"id long not null, price int"`` → a pyspark StructType, without starting Spark.

    Raises _DdlUnknown for syntax it does not know (the caller then asks Spark).
    """
    from pyspark.sql import types as T

    toks = _ddl_tokens(text)
    pos = 0

    def peek(k: int = 0) -> str | None:
        return toks[pos + k] if pos + k < len(toks) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if tok is None or (expected is not None and tok.lower() != expected):
            raise _DdlUnknown(f"expected {expected or 'more'} at {tok!r}")
        pos += 1
        return tok

    def name() -> str:
        tok = take()
        if tok.startswith("`"):
            return tok[1:-1].replace("``", "`")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
            raise _DdlUnknown(tok)
        return tok

    def dtype() -> Any:
        word = take().lower()
        if word in _SIMPLE_TYPES:
            return getattr(T, _SIMPLE_TYPES[word])()
        if word in ("varchar", "char"):
            take("(")
            length = int(take())
            take(")")
            kind = getattr(T, "VarcharType" if word == "varchar" else "CharType", None)
            return T.StringType() if kind is None else kind(length)
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if peek() == "(":
                take("(")
                precision = int(take())
                if peek() == ",":
                    take(",")
                    scale = int(take())
                take(")")
            return T.DecimalType(precision, scale)
        if word == "array":
            take("<")
            element = dtype()
            take(">")
            return T.ArrayType(element, True)
        if word == "map":
            take("<")
            key = dtype()
            take(",")
            value = dtype()
            take(">")
            return T.MapType(key, value, True)
        if word == "struct":
            take("<")
            fields = []
            while peek() != ">":
                fname = name()
                if peek() == ":":
                    take(":")
                fields.append(field(fname))
                if peek() == ",":
                    take(",")
            take(">")
            return T.StructType(fields)
        raise _DdlUnknown(word)

    def field(fname: str) -> Any:
        ftype = dtype()
        nullable = True
        while peek() is not None and peek().lower() in ("not", "comment"):
            if take().lower() == "not":
                take("null")
                nullable = False
            else:
                take()  # the comment string
        return T.StructField(fname, ftype, nullable)

    fields = []
    while pos < len(toks):
        fields.append(field(name()))
        if peek() is not None:
            take(",")
    if not fields:
        raise _DdlUnknown("no columns")
    return T.StructType(fields)


def _columns_struct(columns: str) -> Any:
    """The StructType of a DDL column list: the pure parser, else Spark's parser."""
    try:
        return parse_ddl_columns(columns)
    except (_DdlUnknown, ValueError):
        pass
    _spark("cdc-emitter schema")
    from pyspark.sql.types import StructType

    try:
        struct = StructType.fromDDL(columns)
    except Exception as exc:  # noqa: BLE001 - Spark's parse errors
        first = str(exc).strip().splitlines()[0]
        raise SchemaError(f"cannot parse --columns {columns!r}: {first}") from exc
    if not isinstance(struct, StructType):
        raise SchemaError(f"--columns {columns!r} is not a list of columns")
    return struct


FORMATS = ["parquet", "csv", "json", "orc", "delta", "jdbc", "table", "avro", "text"]


@main.command()
@click.option("--columns", metavar="DDL",
              help='The table\'s columns as a Spark DDL string, e.g. "id long not null, price int".')
@click.option("--from", "source", metavar="SOURCE", help="Take the columns from a table read by Spark.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="parquet", show_default=True,
              help="Format of --from.")
@click.option("-O", "read_options", multiple=True, metavar="KEY=VALUE", callback=_parse_settings,
              help="A Spark reader option for --from (repeatable), e.g. -O header=true.")
@click.option("--data-schema", "data_schema_file", type=click.Path(exists=True, dir_okay=False),
              metavar="FILE", help="An Avro data record schema (or a full CDC union schema) file.")
@click.option("--sql", is_flag=True,
              help="Print the Materialize CREATE SOURCE statement instead of the schema.")
@click.option("--topic", help="The topic, for --sql.")
@click.option("--name", "source_name", metavar="NAME",
              help="The Materialize source name, for --sql (default: the topic name).")
@click.option("--bootstrap-servers", envvar=ENV_BOOTSTRAP, metavar="HOST:PORT", show_envvar=True,
              help="The broker Materialize connects to, for --sql.")
@spark_options
@handle_errors
def schema(columns, source, fmt, read_options, data_schema_file, sql, topic, source_name,
           bootstrap_servers, spark_packages, spark_conf):
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
    if sql:
        servers = _servers(bootstrap_servers)
    from .codec import union_schema

    if data_schema_file is not None:
        data_schema = load_data_schema(data_schema_file)
    elif columns is not None:
        data_schema = _spark_to_avro(_columns_struct(columns))
    else:
        spark = _spark("cdc-emitter schema", spark_packages, spark_conf, fmt)
        data_schema = _spark_to_avro(_read_table(spark, source, fmt, read_options).schema)
    union = union_schema(data_schema)
    if sql:
        click.echo(create_source_sql(source_name or _source_name(topic), servers, topic, union))
    else:
        click.echo(json.dumps(union, indent=2, ensure_ascii=False))


# --- export ---------------------------------------------------------------------------------------


@main.command()
@click.argument("source")
@kafka_options
@click.option("--topic", required=True, help="The topic to write to.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="parquet", show_default=True,
              help="How Spark reads SOURCE (and --previous).")
@click.option("-O", "read_options", multiple=True, metavar="KEY=VALUE", callback=_parse_settings,
              help="A Spark reader option (repeatable), e.g. -O header=true -O inferSchema=true.")
@click.option("--time", "at_time", type=click.IntRange(min=0), metavar="N",
              help="The CDC time of the snapshot (default: the topic's current frontier).")
@click.option("--previous", metavar="SOURCE2",
              help="Write the difference from this earlier snapshot instead of the whole table.")
@click.option("--close", is_flag=True, help="Close the history after this snapshot (upper: []).")
@click.option("--create-topic", is_flag=True, help="Create the topic if it does not exist.")
@click.option("--framing", type=click.Choice(["confluent", "raw"]), default="confluent",
              show_default=True, help="Message framing.")
@click.option("--schema-id", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="Schema id in the Confluent header.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object.")
@spark_options
@handle_errors
def export(source, bootstrap_servers, kafka_settings, topic, fmt, read_options, at_time, previous,
           close, create_topic, framing, schema_id, as_json, spark_packages, spark_conf):
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
    """
    servers = _servers(bootstrap_servers)
    status = _Progress()
    status.show(f"starting Spark to read {source}")
    try:
        spark = _spark("cdc-emitter export", spark_packages, spark_conf, fmt)
        from pyspark.sql import functions as F

        current = _read_table(spark, source, fmt, read_options)
        diff_col = "diff"
        if diff_col in current.columns:
            raise SchemaError(f"source {source!r} has a column named {diff_col!r}; rename it")
        df = current.withColumn(diff_col, F.lit(1).cast("long"))
        if previous is not None:
            before = _read_table(spark, previous, fmt, read_options)
            if [f.name for f in before.schema.fields] != [f.name for f in current.schema.fields]:
                raise SchemaError(
                    f"--previous {previous!r} has columns {before.columns}, "
                    f"but {source!r} has {current.columns}"
                )
            df = df.unionByName(before.withColumn(diff_col, F.lit(-1).cast("long")))
        status.show(f"writing {source} to topic {topic}")
        from .sink import CdcSink

        sink = CdcSink(
            servers, topic, framing=framing, schema_id=schema_id,
            producer_config=kafka_settings or None, create_topic=create_topic,
        )
        written = sink.write(df, time=at_time, close=close)
    finally:
        status.done()
    summary = export_summary(source, previous, topic, at_time, written)
    if as_json:
        click.echo(_dumps(summary))
    else:
        what = f"{source} (difference from {previous})" if previous is not None else source
        click.echo(
            f"exported {what} to topic {topic} at time {summary['time']}: "
            f"{summary['updates']} updates in {summary['messages']} messages, "
            f"frontier {_frontier_text(tuple(summary['frontier']))}"
        )
    sys.exit(EXIT_OK)


def export_summary(source: str, previous: str | None, topic: str, at_time: int | None,
                   written: Any) -> dict:
    """The JSON summary of ``export`` from the sink's BatchResult."""
    lower, upper = written.lower, written.upper
    return {
        "source": source,
        "previous": previous,
        "topic": topic,
        "time": lower if at_time is None else at_time,
        "lower": [lower],
        "upper": [] if upper is None else [upper],
        "frontier": [] if upper is None else [upper],
        "updates": written.updates,
        "messages": written.messages,
    }


if __name__ == "__main__":  # pragma: no cover
    main()
