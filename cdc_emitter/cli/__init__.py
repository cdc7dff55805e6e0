"""The ``cdc-emitter`` command line: `console` holds the click commands (thin), and
`output` renders their results as text or JSON."""

from cdc_emitter.cli import convert as _convert  # noqa: F401 - registers the convert command
from cdc_emitter.cli.console import main

__all__ = ["main"]
