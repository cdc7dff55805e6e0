"""CockroachDB and YDB changefeed topics built from their documented JSON formats.

A :class:`Table` applies random inserts, updates and deletes at increasing timestamps and keeps
its state at each; :func:`cockroachdb_messages` / :func:`ydb_messages` turn the changes into a
changefeed: rows hashed to partitions by key, shuffled within a partition between resolved
messages (order kept per key), resolved timestamps on every partition, and — CockroachDB — the
duplicates its at-least-once delivery allows: a replay of rows after the resolved message that
covers them (as after a changefeed restart), and copies inside a window.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

BASE_WALL = 1_701_102_296_000_000_000  # ns, CockroachDB's documentation era
BASE_STEP = 1_670_792_400_000  # YDB plan steps (ms)


@dataclass
class Change:
    key: int
    before: dict | None
    after: dict | None
    tick: int  # order of the change (a timestamp is derived from it)


@dataclass
class Table:
    """``id long not null, name string, price int``, changed ``tick`` by ``tick``."""

    seed: int
    rows: dict = field(default_factory=dict)
    changes: list = field(default_factory=list)
    tick: int = 0

    def apply(self, n: int, keys: int = 12) -> None:
        rnd = random.Random(self.seed * 1000 + self.tick)
        for _ in range(n):
            self.tick += 1
            key = rnd.randrange(keys)
            before = self.rows.get(key)
            if before is not None and rnd.random() < 0.25:
                after = None
            else:
                after = {
                    "id": key,
                    "name": rnd.choice(["a", "b", None, "ü"]),
                    "price": rnd.randrange(-5, 50),
                }
            if after is None:
                del self.rows[key]
            else:
                self.rows[key] = after
            self.changes.append(Change(key, before, after, self.tick))

    def state(self) -> list[tuple]:
        return sorted((r["id"], r["name"], r["price"]) for r in self.rows.values())


def _partition(key: int, partitions: int) -> int:
    return (key * 7 + 3) % partitions


def _spread(changes: list[Change], partitions: int, rnd: random.Random) -> dict[int, list[Change]]:
    """Changes per partition, shuffled while keeping each key's order."""
    out: dict[int, list[Change]] = {p: [] for p in range(partitions)}
    for p in out:
        mine = [c for c in changes if _partition(c.key, partitions) == p]
        by_key: dict[int, list[Change]] = {}
        for c in mine:
            by_key.setdefault(c.key, []).append(c)
        queues = list(by_key.values())
        while queues:
            q = rnd.choice(queues)
            out[p].append(q.pop(0))
            if not q:
                queues.remove(q)
    return out


def hlc(tick: int, logical: int = 0) -> str:
    return f"{BASE_WALL + tick * 1000}.{logical:010d}"


def resolved_wall(tick: int) -> int:
    """The wall time a resolved message after ``tick`` carries: above every change up to it."""
    return BASE_WALL + tick * 1000 + 500


def cockroachdb_messages(
    changes: list[Change], partitions: int, resolved_tick: int, seed: int, replay: list[Change] = ()
) -> list[tuple[int, bytes, bytes]]:
    """``(partition, key, value)`` of ``changes``, then ``{"resolved": ...}`` for ``resolved_tick``
    on every partition; ``replay``: earlier changes sent again first (duplicates)."""
    rnd = random.Random(seed)
    out = []
    spread = _spread([*replay, *changes], partitions, rnd)
    for p, mine in spread.items():
        for c in mine:
            value = {
                "after": c.after,
                "before": c.before,
                "key": [c.key],
                "updated": hlc(c.tick, c.tick % 3),
            }
            out.append((p, json.dumps([c.key]).encode(), json.dumps(value).encode()))
            if rnd.random() < 0.15:  # an immediate copy (a retried Kafka batch)
                out.append((p, json.dumps([c.key]).encode(), json.dumps(value).encode()))
        out.append(
            (
                p,
                b"",
                json.dumps({"resolved": f"{resolved_wall(resolved_tick)}.0000000000"}).encode(),
            )
        )
    return out


def ydb_messages(
    changes: list[Change], partitions: int, resolved_tick: int, seed: int
) -> list[tuple[int, bytes, bytes]]:
    """YDB ``NEW_AND_OLD_IMAGES`` records with virtual timestamps, and ``{"resolved": [step, 0]}``
    on every partition; images exclude the key column ``id``."""
    rnd = random.Random(seed)
    out = []

    def image(row: dict | None) -> dict | None:
        return None if row is None else {k: v for k, v in row.items() if k != "id"}

    for p, mine in _spread(changes, partitions, rnd).items():
        for c in mine:
            ts = [BASE_STEP + c.tick, 562949953607163 + c.tick]
            if c.after is None:
                value = {"key": [c.key], "erase": {}, "oldImage": image(c.before), "ts": ts}
            else:
                value = {"key": [c.key], "update": {}, "newImage": image(c.after), "ts": ts}
                if c.before is not None:
                    value["oldImage"] = image(c.before)
            out.append((p, json.dumps([c.key]).encode(), json.dumps(value).encode()))
        out.append((p, b"", json.dumps({"resolved": [BASE_STEP + resolved_tick + 1, 0]}).encode()))
    return out


def produce(bootstrap: str, topic: str, messages: list[tuple[int, bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in messages:
        producer.produce(topic, value=value, key=key or None, partition=partition)
    assert producer.flush(30) == 0
