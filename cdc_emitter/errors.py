"""The package's exceptions: one root, `CdcError`, so callers can catch everything we raise.

Messages name the topic/partition/offset, time, column or option involved, and say what to change.
"""

from __future__ import annotations

from collections.abc import Sequence

#: How many characters of a value (a row, a setting, a path) a message shows.
SHOWN_CHARS = 200


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how many were cut: a message shows a
    value, never a whole megabyte row."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


class CdcError(Exception):
    """Root of every error raised by cdc-emitter."""


class ConfigError(CdcError):
    """An option or setting has a value we cannot use."""


class SchemaError(CdcError):
    """A schema cannot be used (unsupported column type, malformed Avro schema, mismatch)."""


class BadInputError(CdcError):
    """Input rows that would make a bad topic; raised before the batch's first message is written.

    For example a null or negative time, a diff overflow or an oversized row.
    """


class LateUpdateError(BadInputError):
    """An update at a time the topic has already closed (its time is below the frontier)."""


class ReplayError(BadInputError):
    """A re-run batch whose data differs from what its first attempt wrote.

    Raised before any message of the re-run is written.
    """


class ConcurrentWriterError(CdcError):
    """Another writer wrote a progress statement into the interval this batch is writing."""


class DecodeError(CdcError):
    """A message cannot be decoded with the given schema and framing."""


class ViolationError(CdcError):
    """A topic broke the CDCv2 protocol while it was followed (as ``verify`` reports it).

    Attributes:
        topic: The topic.
        violations: The violations found (`cdc_emitter.Violation`), in reading order.
        hints: The likely causes of undecodable messages (as ``verify`` gives them), if any.
    """

    #: Violations named in the message; the rest are counted.
    NAMED = 3

    def __init__(self, topic: str, violations: list, hints: Sequence[str] = ()) -> None:
        self.topic, self.violations, self.hints = topic, list(violations), list(hints)
        named = []
        for v in self.violations[: self.NAMED]:
            at = [] if v.time is None else [f"at time {v.time}"]
            if v.partition is not None:
                at.append(f"(partition {v.partition}, offset {v.offset})")
            named.append(" ".join([v.kind, *at]) + f": {shorten(v.detail)}")
        more = len(self.violations) - len(named)
        tail = f"; and {more} more" if more > 0 else ""
        likely = "".join(f". Likely: {hint}" for hint in self.hints)
        super().__init__(
            f"topic {topic!r} breaks the CDCv2 protocol: {'; '.join(named)}{tail}{likely} (run "
            f"cdc-emitter verify --topic {topic} for the whole report)"
        )

    def __reduce__(self) -> tuple:  # pickles (Spark sends errors between processes)
        return (type(self), (self.topic, self.violations, self.hints))


class BrokerError(CdcError):
    """The Kafka cluster cannot be reached, or a topic is missing or unusable."""


class RefusedError(BrokerError):
    """The Kafka cluster refused the client: authentication or the TLS handshake failed.

    Waiting or retrying cannot mend it.
    """


class DeliveryError(CdcError):
    """Kafka did not acknowledge a produced message (the first error seen is reported)."""


class InterruptedBatchError(CdcError):
    """A ``foreachBatch`` batch whose Spark work was interrupted or cancelled: its query was
    stopped (``query.stop()``) while the batch was being written. Its text is short and ends the
    way Spark's stream thread recognises an interruption, so a stopped query ends quietly (see
    `cdc_emitter.sink.interrupted.interrupted_batch`)."""
