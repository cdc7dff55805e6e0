"""The ``cdc-emitter`` group and what every command shares: exit codes, error handling, version.

The commands are one module each (`export`, `verify`, `tail`, `schema`, `convert`), on the
options of `options`; `output` renders their results.

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
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from cdc_emitter import __version__
from cdc_emitter.errors import CdcError

EXIT_OK, EXIT_VIOLATIONS, EXIT_ERROR, EXIT_NOT_REACHED = 0, 1, 2, 3


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
