"""Claims: a batch's progress statement committed before its updates, one writer at a time.

Every writer of a topic produces its statements through a transactional producer whose
``transactional.id`` is the same for the whole topic (`claim_transactional_id`). Kafka lets only
the producer that initialised last commit under that id: a writer that initialises fences every
other. So "read partition 0, decide the interval, commit the statement" is one atomic step — if
another writer initialised in between, this writer's commit fails with `Fenced`, and the step is
taken again on fresh state.

Guarantees: `ClaimProducer.commit` returns only once the statement is committed. Readers with
``isolation.level=read_committed`` see it once Kafka has written the commit's markers, which the
coordinator may do just after the commit returns; a writer that initialises its claims producer
waits for them, so what it reads next holds every claim committed before. It raises
`Fenced` when another writer may have committed since this producer's last initialisation. A
commit that raises may still have landed (its reply lost): the caller looks for it in the topic
before it claims again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from cdc_emitter.errors import DeliveryError
from cdc_emitter.kafka.config import make_client, producer_config, redact_text

__all__ = ["ClaimProducer", "Fenced", "InDoubt", "claim_transactional_id"]

log = logging.getLogger(__name__)

#: A statement message: its value and its headers.
Message = tuple[bytes, list[tuple[str, bytes]]]


class Fenced(Exception):
    """Another writer of the topic initialised its claims producer: what this one read may be
    stale. Take the step again on fresh state (`ClaimProducer.commit`) — which first looks for
    this attempt's statement: a commit whose reply was lost may have landed before the fence."""


class InDoubt(Exception):
    """The claim's transaction failed with an error that leaves its outcome unknown but says
    nothing against trying again (the coordinator's unknown error, or its state changing under
    a commit, as when a writer dies while another fences it). Take the step again on fresh
    state, as after `Fenced`: re-initialising settles the transaction either way, and the
    attempt's statement, if it landed, is found in the topic."""


def claim_transactional_id(topic: str) -> str:
    """The ``transactional.id`` every writer of ``topic`` shares (so that they fence each other).

    Kafka limits nothing on its length, but ACLs are easier to write on a short, fixed prefix:
    ``cdc-emitter.claims.`` and the topic name (a hash of it for names over 200 characters).
    """
    name = topic if len(topic) <= 200 else hashlib.sha256(topic.encode()).hexdigest()
    return f"cdc-emitter.claims.{name}"


class ClaimProducer:
    """The transactional producer that commits a topic's progress statements (claims).

    Args:
        bootstrap_servers: Kafka's bootstrap servers.
        topic: the topic whose partition 0 takes the statements.
        config: client settings (security and such); ``transactional.id`` is set here.
        timeout: seconds each transactional call may take.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        config: Mapping[str, Any] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.topic, self.timeout = topic, timeout
        self.transactional_id = claim_transactional_id(topic)
        cfg = producer_config(bootstrap_servers, config)
        cfg["transactional.id"] = self.transactional_id
        cfg["enable.idempotence"] = True
        cfg["linger.ms"] = 0  # a claim is one small transaction: send it at once
        # a claim right after the last one's commit meets CONCURRENT_TRANSACTIONS until the
        # coordinator has written its markers: retried soon, not after librdkafka's 100 ms
        cfg["retry.backoff.ms"] = 10
        # a writer frozen inside its claim's transaction holds read_committed readers back until
        # another writer fences it or the broker aborts it: after the transaction timeout, kept
        # short (a claim is one small message); its delivery timeout may not exceed it
        limit = int(max(10.0, timeout) * 1000)
        cfg["transaction.timeout.ms"] = limit
        cfg["message.timeout.ms"] = min(int(cfg.get("message.timeout.ms", limit)), limit)
        self._cfg = cfg
        self._producer: Any = None
        # a `start` in progress: its thread, and what it found (the producer, or the error)
        self._starting: tuple[threading.Thread, dict[str, Any]] | None = None
        #: commits since the producer was (re)initialised: 0 means what the writer knows of the
        #: topic was learnt before this producer fenced the others, and must be read again
        self.commits = 0

    def start(self) -> None:
        """Begin initialising the producer in a thread, unless it is initialised or being so;
        `ready` waits for it. A new writer's initialisation takes one or more round trips to the
        transaction coordinator (50 ms to half a second on a local broker): started before the
        caller's own work, it overlaps that work."""
        if self._producer is not None or self._starting is not None:
            return
        found: dict[str, Any] = {}

        def initialise() -> None:
            try:
                found["producer"] = self._initialised()
            except BaseException as exc:  # noqa: BLE001 - handed to ready(), which raises it
                found["error"] = exc

        thread = threading.Thread(target=initialise, name="cdc-emitter-claims", daemon=True)
        thread.start()
        self._starting = (thread, found)

    def raise_failed_start(self) -> None:
        """Raise the error of a `start` that has failed already (a refused transactional id, a
        broker without transactions), without waiting for one still under way: so that a
        caller about to do long work fails first.

        Raises:
            DeliveryError: the start failed.
        """
        starting = self._starting
        if starting is None or starting[0].is_alive() or "error" not in starting[1]:
            return
        self._starting = None
        starting[0].join()
        raise starting[1]["error"]

    def ready(self) -> bool:
        """Initialise the producer if it is not (fencing every other writer of the topic), or
        wait for the initialisation `start` began.

        Returns:
            True when it was just initialised: the caller must read the topic's state afresh.

        Raises:
            DeliveryError: the producer could not be initialised.
        """
        if self._producer is not None:
            return False
        starting, self._starting = self._starting, None
        if starting is None:
            producer = self._initialised()
        else:
            thread, found = starting
            thread.join()
            if "error" in found:
                raise found["error"]
            producer = found["producer"]
        self._producer, self.commits = producer, 0
        return True

    def _initialised(self) -> Any:
        """A new producer, initialised: every other writer of the topic is fenced."""
        producer = make_client(Producer, dict(self._cfg))
        try:
            producer.init_transactions(self.timeout)
        except KafkaException as exc:
            raise DeliveryError(
                f"topic {self.topic!r}: the claims producer (transactional.id "
                f"{self.transactional_id!r}) could not start: {self._text(exc)}. The broker must "
                "allow transactions (transaction.state.log.replication.factor no more than its "
                "brokers) and this client Write on that transactional id"
            ) from None
        return producer

    def commit(self, messages: Sequence[Message]) -> int:
        """Commit ``messages`` to partition 0 as one transaction.

        Returns:
            The offset of the last message.

        Raises:
            Fenced: another writer initialised since this producer did (nothing is visible).
            InDoubt: the transaction failed with an error worth taking the step again for;
                whether it landed is for that step to find in the topic.
            DeliveryError: Kafka refused the messages, or did not answer in time.
        """
        assert self._producer is not None, "ready() first"
        producer, offsets = self._producer, []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                offsets.append(msg.offset())

        try:
            producer.begin_transaction()
            for value, headers in messages:
                producer.produce(
                    self.topic, value=value, headers=headers, partition=0, on_delivery=delivered
                )
            producer.commit_transaction(self.timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            self._drop(abort=isinstance(err, KafkaError) and err.txn_requires_abort())
            if isinstance(err, KafkaError) and err.code() in _FENCING:
                raise Fenced(self._text(exc)) from None
            if isinstance(err, KafkaError) and err.code() in _IN_DOUBT:
                raise InDoubt(self._text(exc)) from None
            raise DeliveryError(
                f"topic {self.topic!r} partition 0: the progress statement's transaction "
                f"failed ({self._text(exc)}); whether it was committed is for the next attempt "
                "to find in the topic"
            ) from None
        self.commits += 1
        return max(offsets) if offsets else -1

    def _drop(self, *, abort: bool) -> None:
        """Let the producer go after a failed transaction; the next `ready` starts a new one."""
        producer, self._producer = self._producer, None
        self.commits = 0  # what the writer carried is no longer vouched for by fencing
        if producer is None:
            return
        if abort:
            try:
                producer.abort_transaction(self.timeout)
            except KafkaException:
                log.debug("aborting a claim transaction failed", exc_info=True)

    def close(self) -> None:
        """Let the producer go (nothing is pending between commits). A `start` under way is
        waited for first, which takes up to ``timeout`` seconds when the broker does not
        answer."""
        starting, self._starting = self._starting, None
        if starting is not None:
            starting[0].join()
        self._producer, self.commits = None, 0

    def _text(self, exc: BaseException) -> str:
        err = exc.args[0] if exc.args else None
        text = f"{err.str()} [{err.name()}]" if isinstance(err, KafkaError) else str(exc)
        return redact_text(text, self._cfg)


#: Error codes that say another producer took the transactional id over.
_FENCING = frozenset(
    code
    for code in (
        getattr(KafkaError, "_FENCED", None),
        getattr(KafkaError, "PRODUCER_FENCED", None),
        getattr(KafkaError, "INVALID_PRODUCER_EPOCH", None),
        getattr(KafkaError, "INVALID_PRODUCER_ID_MAPPING", None),
        getattr(KafkaError, "CONCURRENT_TRANSACTIONS", None),
    )
    if code is not None
)

#: Error codes of a failed claim transaction that say nothing against trying again at once: not
#: a timeout (a broker that is down would only be waited for again), not a refusal (size,
#: authorisation), which no retry changes.
_IN_DOUBT = frozenset(
    code
    for code in (
        getattr(KafkaError, "UNKNOWN", None),
        getattr(KafkaError, "INVALID_TXN_STATE", None),
        getattr(KafkaError, "TRANSACTION_ABORTABLE", None),
        getattr(KafkaError, "UNKNOWN_PRODUCER_ID", None),
        getattr(KafkaError, "COORDINATOR_NOT_AVAILABLE", None),
        getattr(KafkaError, "NOT_COORDINATOR", None),
        getattr(KafkaError, "COORDINATOR_LOAD_IN_PROGRESS", None),
    )
    if code is not None
)
