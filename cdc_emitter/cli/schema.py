"""``cdc-emitter schema``: the CDC Avro schema for a table, or the Materialize statement that
reads its topic."""

from __future__ import annotations

import json

import click

from cdc_emitter.cli.console import handle_errors, main
from cdc_emitter.cli.options import (
    ENV_BOOTSTRAP,
    check_inputs,
    load_data_schema,
    parse_settings,
    require_servers,
    spark_options,
    start_spark,
)
from cdc_emitter.protocol.materialize import create_source_sql
from cdc_emitter.protocol.materialize import source_name as default_source_name
from cdc_emitter.spark.tables import FORMATS, columns_struct, read_table


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
    callback=parse_settings,
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
    from cdc_emitter.protocol.schemas import union_schema
    from cdc_emitter.spark.schema import data_schema as spark_to_avro

    if data_schema_file is not None:
        data_schema = load_data_schema(data_schema_file)
    elif columns is not None:
        data_schema = spark_to_avro(columns_struct(columns))
    else:
        check_inputs([source], fmt, spark_remote, spark_conf, read_options)
        spark = start_spark("cdc-emitter schema", spark_packages, spark_conf, fmt, spark_remote)
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
