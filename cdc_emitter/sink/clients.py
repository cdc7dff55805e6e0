"""The driver's Kafka clients of one sink, and the frontier it carries from batch to batch.

A sink keeps three clients for its life: a consumer for the topic's end offsets and tail
(`TopicOffsets`), the transactional producer of its progress statements (`ClaimProducer`), and
the producer of the update messages the driver writes (`CdcProducer`). Each costs a connection
and a handshake to open (about half a second on a new sink), so each is made once, when first
needed. After a failed write they are released, and the next batch makes new ones.

Guarantees:

- the carried frontier stands in for a tail read only while it is known to be current: no other
  writer has committed a claim since this sink's last one (which would have fenced this sink's
  claims producer), or partition 0, where every statement goes, has not moved past it;
- a topic is checked (created when asked) once per sink, before its first message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cdc_emitter.kafka.claims import ClaimProducer
from cdc_emitter.kafka.frontier import TopicFrontier, retrying
from cdc_emitter.kafka.producer import CdcProducer
from cdc_emitter.kafka.reading import TopicOffsets
from cdc_emitter.protocol.schemas import Framing
from cdc_emitter.sink import options, topic


class TopicClients:
    """One sink's Kafka clients on the driver, and what they tell of its topic.

    Args:
        bootstrap_servers: the Kafka cluster, ``HOST:PORT[,...]``.
        topic: the CDC topic.
        producer_config: the sink's librdkafka settings (`CdcSink`'s ``producer_config``).
        framing: how the topic's messages are framed (for reading its statements).
        broker_timeout: seconds to wait for a broker that does not answer.

    Attributes:
        carried: the frontier as this sink's last claim left it (None: read the tail).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        producer_config: Mapping[str, Any],
        *,
        framing: Framing,
        broker_timeout: float,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.producer_config = dict(producer_config)
        self.framing = framing
        self.broker_timeout = broker_timeout
        self.carried: TopicFrontier | None = None
        self._offsets: TopicOffsets | None = None
        self._claims: ClaimProducer | None = None
        self._producer: CdcProducer | None = None
        self._checked = False
        self._update_partitions: list[int] | None = None

    def offsets(self) -> TopicOffsets:
        """The topic's end offsets and tail, through one consumer."""
        if self._offsets is None:
            self._offsets = TopicOffsets(
                self.bootstrap_servers,
                self.topic,
                options.client_config(self.producer_config),
                broker_timeout=self.broker_timeout,
            )
        return self._offsets

    def frontier(self, schema_id: int, back_to: int | None = None) -> TopicFrontier:
        """The topic's frontier, read from its tail (`topic.read_frontier`).

        Args:
            schema_id: the schema id of the sink's Confluent header.
            back_to: read back until a statement whose lower bound is at most this time.

        Raises:
            BrokerError: the topic is missing or the broker cannot be reached.
        """
        return topic.read_frontier(
            self.bootstrap_servers,
            self.topic,
            framing=self.framing,
            schema_id=schema_id,
            config=options.client_config(self.producer_config),
            offsets=self.offsets(),
            broker_timeout=self.broker_timeout,
            back_to=back_to,
        )

    def learn_frontier(self, read: Callable[[], TopicFrontier]) -> TopicFrontier:
        """The topic's frontier: the carried one while no other writer fenced the claims
        producer (no request at all), or while partition 0 has not moved past it (one offset
        request); else ``read`` from the tail (`frontier`, through the sink), and carried from
        then on."""
        carried = self.carried
        if carried is not None and self._claims is not None and self._claims.commits:
            return carried  # no other writer committed since: it would have fenced our claims
        if carried is not None and self._partition0_end() == carried.partition0_end:
            return carried
        self.carried = state = read()
        return state

    def _partition0_end(self) -> int:
        """Partition 0's end offset, retried while the broker briefly cannot say (restarted,
        leader moving: the kept client's metadata is refreshed meanwhile)."""
        return retrying(lambda: self.offsets().end(0), self.broker_timeout)

    def update_partitions(
        self, *, create: bool, partitions: int, max_message_bytes: int
    ) -> list[int] | None:
        """Check the topic once (`topic.writable_topic`: it exists, or is created, and takes
        messages as large as the sink makes); return where update messages go (None:
        partition 0 only)."""
        if not self._checked:
            self._update_partitions = topic.writable_topic(
                self.bootstrap_servers,
                self.topic,
                self.offsets(),
                create=create,
                partitions=partitions,
                config=options.client_config(self.producer_config),
                max_message_bytes=max_message_bytes,
                broker_timeout=self.broker_timeout,
            )
            self._checked = True
        return self._update_partitions

    def claims(self) -> ClaimProducer:
        """The transactional producer of the progress statements (claims)."""
        if self._claims is None:
            self._claims = ClaimProducer(
                self.bootstrap_servers,
                self.topic,
                self.producer_config,
                timeout=self.broker_timeout,
            )
        return self._claims

    def start_fencing(self) -> None:
        """Begin starting the claims producer in the background (`ClaimProducer.start`), so
        that its round trips overlap the batch's own reads of the topic and its Spark job.
        Starting it fences every other writer; the claim waits for it (`ClaimProducer.ready`)
        and then reads the topic again."""
        self.claims().start()

    def raise_failed_fencing(self) -> None:
        """Raise the error of a claims producer whose start failed already (before a Spark job
        that would otherwise run first: `ClaimProducer.raise_failed_start`)."""
        if self._claims is not None:
            self._claims.raise_failed_start()

    def producer(self) -> CdcProducer:
        """The producer of the update messages the driver writes (a new one per batch would pay
        a connection and an idempotence handshake every time)."""
        if self._producer is None:
            self._producer = CdcProducer(self.bootstrap_servers, self.topic, self.producer_config)
        return self._producer

    def release(self) -> None:
        """Close the clients (new ones are made when next needed)."""
        producer, self._producer = self._producer, None
        offsets, self._offsets = self._offsets, None
        claims, self._claims = self._claims, None
        if claims is not None:
            claims.close()
        if producer is not None:
            producer.close()
        if offsets is not None:
            offsets.close()
