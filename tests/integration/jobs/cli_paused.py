"""``cdc-emitter`` with a pause after each claim, for the interrupt tests.

Runs the CLI's ``main`` with `cdc_emitter.sink.commit.record_later` wrapped: a sink calls it
right after its batch's claim is committed and before the updates are written; here it then
prints ``claimed`` on stderr and sleeps ``CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM`` seconds (default
60), so that a test can stop the command exactly there. Arguments are the CLI's.
"""

from __future__ import annotations

import os
import sys
import time

from cdc_emitter.cli import main
from cdc_emitter.sink import commit

_record_later = commit.record_later


def _record_then_pause(*args, **kwargs):
    result = _record_later(*args, **kwargs)
    print("claimed", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get("CDC_EMITTER_TEST_PAUSE_AFTER_CLAIM", "60")))
    return result


commit.record_later = _record_then_pause

if __name__ == "__main__":
    main(prog_name="cdc-emitter")
