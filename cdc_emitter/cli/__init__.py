"""The ``cdc-emitter`` command line: :mod:`.console` holds the click commands (thin), and
:mod:`.output` renders their results as text or JSON."""

from . import convert as _convert  # noqa: F401 - registers the convert command
from .console import main

__all__ = ["main"]
