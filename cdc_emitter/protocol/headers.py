"""Our message headers: what a sink's messages say beside their Avro value.

The protocol itself needs none of them: a reader of CDCv2 decodes the values only. A sink uses
them to find the topic's frontier and to recognise a batch it wrote before (a re-run) without
decoding anything.

Guarantees: every message a sink writes carries `HEADER_KIND` and `HEADER_WRITER`;
every progress statement it writes carries `HEADER_LOWER` and `HEADER_UPPER`.
"""

from __future__ import annotations

__all__ = [
    "HEADER_BATCH",
    "HEADER_BATCH_LOWER",
    "HEADER_BATCH_UPPER",
    "HEADER_DIGEST",
    "HEADER_KIND",
    "HEADER_LOWER",
    "HEADER_SCHEMA",
    "HEADER_SHAPE",
    "HEADER_UPPER",
    "HEADER_WRITER",
    "marks_updates",
]

HEADER_KIND = "cdc-emitter-kind"  # b"updates" or b"progress", on every message
HEADER_WRITER = "cdc-emitter-writer"  # the writer (streaming query) id
HEADER_BATCH = "cdc-emitter-batch"  # the batch id (absent for one-off writes)
HEADER_LOWER = "cdc-emitter-lower"  # progress messages: the interval
HEADER_UPPER = "cdc-emitter-upper"  # empty value: the history is closed
HEADER_SCHEMA = "cdc-emitter-schema"  # progress messages: the data record schema (compact JSON)
HEADER_DIGEST = "cdc-emitter-digest"  # progress messages: {"xor": hex, "counts": [[t, n]...]}
# progress messages: the batch's {"rows": input rows, "groups": their distinct data and times,
# "bytes": of its update messages}: what a new sink's first batch is sized by (a hint only)
HEADER_SHAPE = "cdc-emitter-shape"
# a batch whose counts do not fit one message writes several statements tiling its interval:
# each carries the batch's interval here (its own in HEADER_LOWER/UPPER); the digest is on the last
HEADER_BATCH_LOWER = "cdc-emitter-batch-lower"
HEADER_BATCH_UPPER = "cdc-emitter-batch-upper"


def marks_updates(headers: list) -> bool:
    """Whether a message's headers (``(key, value)`` pairs) mark it as an update message: a
    reader keeps the headers of the others (statements) for `CdcReader.push`."""
    for key, value in headers:
        if key == HEADER_KIND:
            return value == b"updates"
    return False
