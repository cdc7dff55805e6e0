"""``cdc-emitter`` with a pause after each claim, for the interrupt tests.

Runs the CLI's ``main`` with `CdcSink._claim` wrapped: a sink calls it to commit its batch's
claim, before the updates are written; here it then prints ``claimed`` on stderr and sleeps
``CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM`` seconds (default 60), so that a test can stop the command
exactly there. Arguments are the CLI's.
"""

from __future__ import annotations

import os
import sys
import time

from cdc_emitter.cli import main
from cdc_emitter.sink.sink import CdcSink

_claim = CdcSink._claim


def _claim_then_pause(self, *args, **kwargs):
    result = _claim(self, *args, **kwargs)
    print("claimed", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM", "60")))
    return result


CdcSink._claim = _claim_then_pause  # type: ignore[method-assign]

if __name__ == "__main__":
    main(prog_name="cdc-emitter")
