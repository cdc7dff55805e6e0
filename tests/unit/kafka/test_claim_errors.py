"""How a failed claim transaction is read (`ClaimProducer.commit`): a fence, an outcome in doubt
worth taking the step again for, or an error no retry changes. The producer here is a stand-in
whose commit fails with the given librdkafka error; no broker is asked anything."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc_emitter.errors import DeliveryError
from cdc_emitter.kafka.claims import ClaimProducer, Fenced, InDoubt


class FailingProducer:
    """Begins and produces; its commit fails with ``error``."""

    def __init__(self, error: KafkaError) -> None:
        self.error, self.aborted = error, False

    def init_transactions(self, timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        pass

    def produce(self, *args, **kwargs) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        raise KafkaException(self.error)

    def abort_transaction(self, timeout: float) -> None:
        self.aborted = True


@pytest.fixture
def commit_failing_with(monkeypatch):
    def commit(error: KafkaError) -> tuple[BaseException, ClaimProducer]:
        monkeypatch.setattr(
            "cdc_emitter.kafka.claims.make_client", lambda _cls, _cfg: FailingProducer(error)
        )
        claims = ClaimProducer("127.0.0.1:1", "t")
        assert claims.ready()
        with pytest.raises(Exception) as info:
            claims.commit([(b"statement", [])])
        return info.value, claims

    return commit


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError.UNKNOWN, "Unknown broker error", txn_requires_abort=True),
        KafkaError(KafkaError.INVALID_TXN_STATE, "invalid state", fatal=True),
        KafkaError(KafkaError.UNKNOWN_PRODUCER_ID, "unknown producer", txn_requires_abort=True),
        KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, "no coordinator", retriable=True),
    ],
    ids=lambda e: e.name(),
)
def test_in_doubt_the_step_is_taken_again(commit_failing_with, error):
    raised, claims = commit_failing_with(error)
    assert isinstance(raised, InDoubt)
    assert str(raised) == f"{error.str()} [{error.name()}]"
    assert claims.ready()  # the producer was let go: the next step fences and reads afresh


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._FENCED, "fenced", fatal=True),
        KafkaError(KafkaError.PRODUCER_FENCED, "fenced"),
        KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, "concurrent", retriable=True),
    ],
    ids=lambda e: e.name(),
)
def test_a_fence(commit_failing_with, error):
    raised, _ = commit_failing_with(error)
    assert isinstance(raised, Fenced)


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True),
        KafkaError(KafkaError._MSG_TIMED_OUT, "message timed out", txn_requires_abort=True),
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied", txn_requires_abort=True),
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large", txn_requires_abort=True),
    ],
    ids=lambda e: e.name(),
)
def test_no_retry_changes_it(commit_failing_with, error):
    raised, claims = commit_failing_with(error)
    assert isinstance(raised, DeliveryError)
    assert str(raised) == (
        f"topic 't' partition 0: the progress statement's transaction failed ({error.str()} "
        f"[{error.name()}]); whether it was committed is for the next attempt to find in the topic"
    )
    assert claims.ready()
