"""``cdc-emitter tail``: a CDC topic's messages as Avro-JSON lines."""

from __future__ import annotations

import math
import sys

import click

from cdc_emitter.cli.console import EXIT_OK, EXIT_VIOLATIONS, handle_errors, main, on_interrupt
from cdc_emitter.cli.options import (
    codec_options,
    kafka_options,
    open_reader,
)


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
    Without --schema or --schema-registry the schema is the one the sink wrote into the
    header of the topic's newest progress statement; with --follow, a topic that has none yet
    is waited on for its first (up to --timeout).

    \b
    Example:
      cdc-emitter tail --bootstrap-servers 127.0.0.1:9092 --topic products
      {"array":[{"data":{"id":5,"price":{"int":10}},"time":5,"diff":1}]}
      {"com.materialize.cdc.progress":{"lower":[0],"upper":[3],"counts":[]}}
    """
    from cdc_emitter.errors import DecodeError
    from cdc_emitter.kafka.reading import read_topic

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
        # --follow may start before the writer: wait for its first statement (the schema)
        wait_for_schema=(math.inf if timeout is None else timeout)
        if follow and schema_file is None and schema_registry is None
        else 0.0,
    )
    if max_messages == 0:
        sys.exit(EXIT_OK)
    printed = bad = 0
    on_interrupt(lambda: f"stopped reading topic {topic} after {printed} messages")
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
    sys.exit(EXIT_VIOLATIONS if bad else EXIT_OK)
