"""The ``cdc-emitter`` command line: :mod:`.console` holds the click commands (thin), and
:mod:`.output` renders their results as text or JSON."""

from .console import main

__all__ = ["main"]
