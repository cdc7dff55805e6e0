"""The ``cdc-emitter`` command line: `console` holds the ``main`` group and what every command
shares, `options` the shared click options, one module per command (`verify`, `tail`,
`schema`, `export`, `convert`, `apply`) registers it on ``main``, and `output` renders their results as
text or JSON."""

# importing a command's module registers the command on `main`
from cdc_emitter.cli import apply as _apply  # noqa: F401
from cdc_emitter.cli import convert as _convert  # noqa: F401
from cdc_emitter.cli import export as _export  # noqa: F401
from cdc_emitter.cli import schema as _schema  # noqa: F401
from cdc_emitter.cli import tail as _tail  # noqa: F401
from cdc_emitter.cli import verify as _verify  # noqa: F401
from cdc_emitter.cli.console import main

__all__ = ["main"]
