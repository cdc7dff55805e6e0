"""Producing to one topic: `CdcProducer`.

Guarantees: `CdcProducer.flush` raises `DeliveryError` (with
the topic, partition and text of the FIRST error) if any message was not acknowledged, or if
messages were still undelivered when the flush timed out. A flush that returns normally means
every message produced so far is durable in Kafka (``acks=all``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from cdc_emitter.errors import DeliveryError
from cdc_emitter.kafka.config import REFUSALS, make_client, producer_config, redact_config

__all__ = ["CdcProducer"]

log = logging.getLogger(__name__)


class CdcProducer:
    """A producer for one topic that turns every failed delivery into a `DeliveryError`.

    Use it as a context manager; leaving the block normally flushes (and raises if anything
    failed)::

        with CdcProducer("127.0.0.1:9092", "t") as producer:
            producer.produce(b"...")
        # here every message is acknowledged by Kafka (acks=all), or DeliveryError was raised

    Guarantees: ``produce`` never drops a message silently (a full local queue is drained by
    polling and the message is retried); the FIRST delivery error is kept with its topic,
    partition and text; once an error has been seen, further ``produce`` calls raise at once.
    """

    def __init__(
        self, bootstrap_servers: str, topic: str, config: Mapping[str, Any] | None = None
    ) -> None:
        self.topic = topic
        self.config = producer_config(bootstrap_servers, config)
        self.produced = 0  # messages handed to librdkafka
        self.reported = 0  # delivery reports received, acknowledged or failed
        self.delivered = 0
        self.failed = 0
        #: ``{partition: offset}`` of the latest acknowledged message in each partition
        self.last_offsets: dict[int, int] = {}
        self.first_error: str | None = None
        self.refused = False  # the cluster refused us (credentials, certificate): do not wait
        self._pending_error: tuple[int | None, str] | None = None
        cfg = dict(self.config)
        cfg["error_cb"] = self._on_client_error
        self._producer = make_client(Producer, cfg)
        log.debug("producer for topic %r: %s", topic, redact_config(self.config))

    # callbacks run inside poll()/flush() on the calling thread
    def _record_error(self, partition: int | None, text: str) -> None:
        self.failed += 1
        if self.first_error is None:
            where = (
                f"partition {partition}"
                if partition is not None and partition >= 0
                else "a partition"
            )
            self.first_error = f"delivery to topic {self.topic!r} {where} failed: {text}"

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        self.reported += 1
        if err is None:
            self.delivered += 1
            self.last_offsets[msg.partition()] = msg.offset()
        else:
            text = f"{err.str()} [{err.name()}]"
            if err.code() == KafkaError._MSG_TIMED_OUT:
                text += (
                    f": not acknowledged within message.timeout.ms="
                    f"{self.config.get('message.timeout.ms')} ms (is the broker down?)"
                )
            self._record_error(msg.partition() if msg is not None else None, text)

    def _on_client_error(self, err: KafkaError) -> None:
        # Transient errors (broker down, reconnecting) are retried by librdkafka; the
        # delivery timeout turns a lasting outage into delivery errors. Fatal ones count, and so
        # does a refusal (wrong credentials, untrusted certificate): waiting cannot mend it.
        what = REFUSALS.get(err.code())
        if err.fatal():
            self._record_error(None, f"fatal producer error: {err.str()} [{err.name()}]")
        elif what is not None:
            self.refused = True
            self._record_error(
                None, f"{what} with Kafka at {self.config['bootstrap.servers']} failed: {err.str()}"
            )
        else:
            log.debug("kafka client error (retried): %s", err.str())

    def _raise_if_failed(self) -> None:
        if self.first_error is not None:
            more = f" ({self.failed} failed deliveries in all)" if self.failed > 1 else ""
            raise DeliveryError(self.first_error + more)

    def produce(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue one message (asynchronous; `flush` waits for the acknowledgements).

        Raises DeliveryError when an earlier delivery failed or Kafka refuses the message
        outright (e.g. larger than ``message.max.bytes``, unknown partition).
        """
        self._raise_if_failed()
        kwargs: dict[str, Any] = {"value": value, "on_delivery": self._on_delivery}
        if key is not None:
            kwargs["key"] = key
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(self.topic, **kwargs)
                self.produced += 1
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                self._producer.poll(0.05)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else exc
                text = f"{err.str()} [{err.name()}]" if isinstance(err, KafkaError) else str(err)
                self._record_error(partition, text)
                self._raise_if_failed()
        self._producer.poll(0)

    def poll(self, timeout: float = 0) -> None:
        """Serve delivery reports; raises DeliveryError if a delivery has failed."""
        self._producer.poll(timeout)
        self._raise_if_failed()

    def settle(self, timeout: float) -> None:
        """Give queued messages up to ``timeout`` seconds to land, raising nothing: for a task that
        fails anyway (its retry writes them again), so as few as possible are left in flight."""
        try:
            self._producer.flush(timeout)
        except Exception:  # noqa: BLE001 - the task's own error is the one to report
            log.debug("settling the producer of topic %r failed", self.topic, exc_info=True)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued message is acknowledged; raise DeliveryError otherwise.

        ``timeout=None`` waits as long as librdkafka's delivery timeout (``message.timeout.ms``)
        allows. Messages still undelivered when ``timeout`` expires are a failure too.
        """
        began = time.monotonic()
        while True:  # in slices, so a refusal (wrong password) fails now, not at the timeout
            left = None if timeout is None else timeout - (time.monotonic() - began)
            self._producer.flush(0.5 if left is None else max(0.0, min(0.5, left)))
            if self.refused:
                self._raise_if_failed()
            if len(self) == 0 or (left is not None and left <= 0.5):
                break
        self._raise_if_failed()
        remaining = len(self)
        if remaining > 0:
            raise DeliveryError(
                f"{remaining} message(s) to topic {self.topic!r} were not delivered within "
                f"{timeout}s (bootstrap servers {self.config['bootstrap.servers']})"
            )

    def close(self) -> None:
        """Give queued messages a short chance, then let the client go."""
        try:
            self._producer.flush(1)
        except Exception:  # noqa: BLE001 - closing must not raise
            pass

    def __len__(self) -> int:
        """Our messages not yet acknowledged or failed.

        Counted from the delivery reports: librdkafka's queue length also counts the client's
        own protocol requests (an idempotent producer's, for one). That length still bounds it,
        for a client set to report failed deliveries only (``delivery.report.only.error``).
        """
        return min(self.produced - self.reported, len(self._producer))

    def __enter__(self) -> CdcProducer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.flush()
        else:  # do not hide the original exception; give queued messages a short chance
            try:
                self._producer.flush(5)
            except Exception:  # noqa: BLE001
                pass
