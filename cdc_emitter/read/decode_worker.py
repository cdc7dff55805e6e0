"""A decode worker of `cdc_emitter.read.decode_pool.DecodePool` (run as ``python -m``).

Reads frames from stdin: first the codec spec (JSON), then marshal-ed chunks of
``(partition, offset, value)``; writes one result frame per chunk to stdout, in order. Ends at
the end of stdin.
"""

from __future__ import annotations

import gc
import json
import marshal
import sys

from cdc_emitter.protocol.codec import CdcCodec
from cdc_emitter.read.decode_pool import decode_chunk, dump_entries, read_frame, write_frame


def main() -> int:
    gc.disable()  # decoded rows hold no reference cycles: the cyclic collector only costs time
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    spec = read_frame(stdin)
    if spec is None:
        return 0
    options = json.loads(spec)
    writer_schemas = None
    if "registry" in options:
        from cdc_emitter.kafka.registry import SchemaRegistry

        writer_schemas = SchemaRegistry(**options["registry"]).data_schema
    codec = CdcCodec(
        options["data_schema"],
        framing=options["framing"],
        schema_id=options["schema_id"],
        writer_schemas=writer_schemas,
    )
    while True:
        frame = read_frame(stdin)
        if frame is None:
            return 0
        chunk = marshal.loads(frame)
        write_frame(stdout, dump_entries(decode_chunk(codec, chunk, by_column=True)))


if __name__ == "__main__":
    sys.exit(main())
