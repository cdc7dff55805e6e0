"""``python -m cdc_emitter.cli``: the same commands as the ``cdc-emitter`` script."""

from cdc_emitter.cli import main

main()
