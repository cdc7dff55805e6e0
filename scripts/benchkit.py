"""What the benchmark scripts share: a Kafka broker for the length of a run.

``kafka()`` yields ``KAFKA_BOOTSTRAP_SERVERS`` when it is set; otherwise it starts a broker with
``scripts/kafka-local`` in a state dir of its own and stops it (removing its data) at the end.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

KAFKA_LOCAL = Path(__file__).resolve().parent / "kafka-local"


@contextlib.contextmanager
def kafka() -> Iterator[str]:
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if servers:
        yield servers
        return
    env = dict(os.environ, CDC_KAFKA_HOME=tempfile.mkdtemp(prefix="cdc-bench-kafka-"))
    out = subprocess.run([str(KAFKA_LOCAL), "start"], env=env, capture_output=True, text=True,
                         check=True)
    try:
        yield out.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(KAFKA_LOCAL), "stop"], env=env, capture_output=True)
