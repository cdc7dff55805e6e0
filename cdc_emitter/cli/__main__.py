"""``python -m cdc_emitter.cli``: the same commands as the ``cdc-emitter`` script."""

from .console import main

main()
