"""A producer that fails on cue, for the sink's executor tasks (``DataPaths.task_producer``).

Pickled by value into Spark's task closures (``register_pickle_by_value``), so the executors'
Python needs nothing of the tests.
"""

from __future__ import annotations

from typing import Any


class FailAfterMessages:
    """A producer factory: attempt 0 of task 0 fails after ``messages`` acknowledged messages
    (flushed first, so they are really in the topic); every other task and attempt gets a plain
    :class:`~cdc_emitter.kafka.producer.CdcProducer`."""

    def __init__(self, messages: int) -> None:
        self.messages = messages

    def __call__(self, spec: Any) -> Any:
        from pyspark import TaskContext

        from cdc_emitter.kafka.producer import CdcProducer

        producer = CdcProducer(spec.bootstrap_servers, spec.topic, spec.producer_config)
        ctx = TaskContext.get()
        if ctx is None or ctx.attemptNumber() != 0 or ctx.partitionId() != 0:
            return producer
        return _Failing(producer, self.messages)


class _Failing:
    def __init__(self, producer: Any, after: int) -> None:
        self.producer, self.after, self.produced = producer, after, 0

    def produce(self, value: bytes, **options: Any) -> None:
        self.producer.produce(value, **options)
        self.produced += 1
        if self.produced >= self.after:
            self.producer.flush()
            raise RuntimeError(
                f"test producer: task attempt 0 fails after {self.produced} messages"
            )

    def flush(self, timeout: float | None = None) -> None:
        self.producer.flush(timeout)

    def settle(self, timeout: float) -> None:
        self.producer.settle(timeout)


def pickled_by_value() -> None:
    """Make Spark ship this module's code with the closures that use it."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FailOnceAfterRows:
    """A function for a Python UDF over a message's value: attempt 0 of task 0 fails on its
    ``rows``-th row, after a pause that lets the messages before it reach the broker; every
    other task and attempt passes each value through. Put in front of Spark's Kafka writer, it
    fails a write task part-way, which Spark retries."""

    def __init__(self, rows: int, pause: float = 2.0) -> None:
        self.rows, self.pause = rows, pause
        self.seen = 0

    def __call__(self, value):  # no type hints: PySpark would try to infer a pandas UDF from them
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and ctx.partitionId() == 0:
            self.seen += 1
            if self.seen == self.rows:
                time.sleep(self.pause)
                raise RuntimeError("injected failure of a write task, after some of its messages")
        return value
