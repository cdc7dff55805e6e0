"""The ``cdc-emitter`` group and what every command shares: exit codes, error handling, version.

The commands are one module each (`export`, `verify`, `tail`, `schema`, `convert`), on the
options of `options`; `output` renders their results.

Exit codes (every command): 0 success; 2 usage, schema, configuration or connection error
(printed as ``error: ...`` on stderr, never a traceback); 130 interrupted (Ctrl-C, SIGINT) and
143 terminated (SIGTERM), with one line saying what was left and how to complete it. ``verify`` adds 1 (protocol violations,
takes precedence) and 3 (not proven: the target frontier was not reached in time, or without a
target the topic is empty or ends with part of its history unproven); ``tail`` exits 1 when a
message could not be decoded.

Spark is imported only by the commands that need it (``export``, ``schema --columns/--from``,
``verify --engine spark``, ``convert``), so ``verify`` and ``tail`` start fast and run where no JVM is installed.
"""

from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import click

from cdc_emitter import __version__
from cdc_emitter.errors import CdcError, shorten

EXIT_OK, EXIT_VIOLATIONS, EXIT_ERROR, EXIT_NOT_REACHED = 0, 1, 2, 3
#: The shell's codes for a process ended by SIGINT (Ctrl-C) and by SIGTERM: 128 + the signal.
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class Terminated(BaseException):
    """SIGTERM arrived: raised in the main thread, like KeyboardInterrupt for SIGINT, so that
    the command stops where it is and says what it left."""


def _on_sigterm(signum: int, frame: Any) -> None:
    spark = sys.modules.get("pyspark")
    if spark is not None:  # what Spark does itself for Ctrl-C: its jobs stop with us
        context = getattr(spark, "SparkContext", None)
        active = getattr(context, "_active_spark_context", None)
        if active is not None:
            try:
                active.cancelAllJobs()
            except Exception:  # noqa: BLE001 - a JVM already gone
                pass
    raise Terminated()


def on_interrupt(describe: Callable[[], str]) -> None:
    """Let the running command say what an interrupt leaves: ``describe()`` is called when
    SIGINT or SIGTERM stops it, and its text printed after ``interrupted:``."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.find_root().meta["cdc_emitter.on_interrupt"] = describe


def _left_text() -> str:
    ctx = click.get_current_context(silent=True)
    describe = None if ctx is None else ctx.find_root().meta.get("cdc_emitter.on_interrupt")
    if describe is None:
        return "nothing was written"
    try:
        return describe()
    except Exception:  # noqa: BLE001 - the line must be printed whatever happened
        return "what was left is unknown"


def handle_errors(func: Callable) -> Callable:
    """Expected errors become ``error: ...`` on stderr and exit code 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KeyboardInterrupt:
            _stopped("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
        except Terminated:
            _stopped("terminated (SIGTERM)", EXIT_TERMINATED)
        except CdcError as exc:
            _fail(str(exc))
        except OSError as exc:
            name = f" {exc.filename}" if getattr(exc, "filename", None) else ""
            _fail(f"cannot use file{name}: {exc.strerror or exc}")

    return wrapper


def _fail(message: str) -> None:
    click.echo(f"error: {shorten(message, MESSAGE_CHARS)}", err=True)
    sys.exit(EXIT_ERROR)


#: A message longer than this is cut (a value in it should already be, see errors.shorten).
MESSAGE_CHARS = 2000


def _stopped(how: str, code: int) -> None:
    # on a terminal the ^C the shell echoed (or a status line) shares the line: start a new one
    click.echo(f"{chr(10) if sys.stderr.isatty() else ''}{how}: {_left_text()}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="cdc-emitter")
def main() -> None:
    """Write changefeeds from Spark into Kafka in the Materialize CDC format, and verify them.

    \b
    Kafka: --bootstrap-servers HOST:PORT (or KAFKA_BOOTSTRAP_SERVERS), librdkafka settings as
    repeated -X key=value. Exit codes: 0 ok, 1 violations (verify) or undecodable messages
    (tail), 2 usage/schema/connection error, 3 not proven (verify: target not reached in time,
    or an empty or incomplete topic), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
    """
    # librdkafka's transient complaints (retries, coordinator loading) are not the user's
    # concern: lasting problems surface as `error: ...` with the servers named.
    logging.getLogger("cdc_emitter.kafka.librdkafka").setLevel(logging.ERROR)
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        click.get_current_context().call_on_close(lambda: signal.signal(signal.SIGTERM, previous))
