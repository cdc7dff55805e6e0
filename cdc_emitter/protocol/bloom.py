"""Strict mode's compact memory of reported updates: a scalable Bloom filter (on ``rbloom``).

Two keys per reported update go in: the whole ``(data, time, diff)`` and the pair
``(data, time)``. A late update whose triple is not in the filter is certainly no duplicate of a
reported update (no false violation, ever); its pair tells a conflicting diff from new data.
The filter misses a late non-duplicate (takes it for a duplicate) with probability at most the
error rate. The number of updates is not known up front, so filters are chained: each one
twice the capacity of the last at half its error rate, which keeps the sum under the rate.
Memory: about 1.7 MiB per million keys at 0.001, so 3.4 MiB per million updates.

Keys are hashed through their ``repr``: Python's own ``hash`` cannot serve, because equal
hashes are built into it for values the reader must tell apart (``hash(-1) == hash(-2)``, so
diffs -1 and -2 would look the same). ``repr`` tells every decoded value apart and is the same
for equal ones (the codec makes every NaN one object and -0.0 into 0.0). ``hash`` of a string is
salted per process: a filter lives in one process.
"""

from __future__ import annotations

from typing import Any

from rbloom import Bloom


def _key_hash(key: tuple) -> int:
    return hash(repr(tuple(key)))  # tuple(): an Update and a plain tuple share one key


#: Keys (two per update) the first filter of the chain holds.
FIRST_CAPACITY = 1 << 20


class BloomMemory:
    """Reported updates for `CdcReader` in strict ``"bloom"`` mode."""

    def __init__(self, error_rate: float = 0.001, first_capacity: int = FIRST_CAPACITY):
        if not 0 < error_rate < 1:
            raise ValueError(f"bloom_error_rate must be in (0, 1), got {error_rate!r}")
        self.error_rate = error_rate
        self._capacity = first_capacity
        self._filters: list[Bloom] = []
        self._room = 0  # keys the newest filter still takes within its error rate
        self.keys = 0

    @property
    def nbytes(self) -> int:
        return sum(f.size_in_bits for f in self._filters) // 8

    def _add(self, keys: list) -> None:
        while keys:
            if self._room == 0:
                depth = len(self._filters)
                capacity = self._capacity << depth
                self._filters.append(Bloom(capacity, self.error_rate / 2 ** (depth + 1), _key_hash))
                self._room = capacity
            take, keys = keys[: self._room], keys[self._room :]
            self._filters[-1].update(take)
            self._room -= len(take)
            self.keys += len(take)

    def remember(self, time: int, at_time: dict[Any, Any]) -> None:
        updates = list(at_time.values())
        self._add(updates + [(u[0], time) for u in updates])

    def add(self, data: Any, time: int, diff: int) -> None:
        self._add([(data, time, diff), (data, time)])

    def check(self, data: Any, time: int, diff: int) -> int:
        """0: (probably) a duplicate of a reported update; 1: same (data, time), other diff; 2: new."""
        triple, pair = (data, time, diff), (data, time)
        if any(triple in f for f in self._filters):
            return 0
        return 1 if any(pair in f for f in self._filters) else 2
