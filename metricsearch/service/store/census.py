"""The metadata keys the embedded store's items hold, with the kinds of their values, so a filter that can match no
stored value is answered empty without the engine: a condition on a key no item holds (a typo, or a key whose items
were all deleted), or one asking a string of a key that holds numbers, makes qdrant-edge check every point, even with
a payload index: 140-280 ms at 100k points, under the lock every search waits on (docs/operations.md, "Indexed
filters").

Each kind is counted by the items that hold it, and a delete or a replacing write takes the old item's metadata away
(the store's vector mirror keeps it), so the census holds what the items hold now. Only the embedded store keeps one:
it sees every write, where a Qdrant server is written by every replica.
Written by hand: a dict of counters, fed by the store's writes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from metricsearch.core.filters import AnyOf, Condition, Equals
from metricsearch.service.store.payload import value_kinds


def wanted_kinds(condition: Condition) -> set[str]:
    """The kinds of stored value (payload.value_kinds) a condition can match: those of its own values, since a string
    matches strings, a number numbers (2 equals 2.0) and a boolean booleans; a range numbers only."""
    if isinstance(condition, Equals):
        return value_kinds(condition.value)
    if isinstance(condition, AnyOf):
        return set().union(*map(value_kinds, condition.values))
    return {"float"}


class MetadataCensus:
    """Every metadata key the items hold, with how many items hold each kind of value under it."""

    def __init__(self) -> None:
        self._kinds: dict[str, Counter[str]] = {}

    def add(self, metadata: Iterable[Mapping[str, object]]) -> None:
        for one in metadata:
            for key, value in one.items():
                self._kinds.setdefault(key, Counter()).update(value_kinds(value))

    def remove(self, metadata: Iterable[Mapping[str, object]]) -> None:
        """Take away items' metadata as `add` counted it: a kind no item holds any more leaves, and a key with it."""
        for one in metadata:
            for key, value in one.items():
                held = self._kinds.get(key)
                if held is None:
                    continue
                for kind in value_kinds(value) & held.keys():
                    held[kind] -= 1
                    if not held[kind]:
                        del held[kind]
                if not held:
                    del self._kinds[key]

    def matches_nothing(self, conditions: Sequence[Condition]) -> bool:
        """Whether no stored item can meet all the conditions: one of them wants a kind its key does not hold."""
        return any(c.key not in self._kinds or not wanted_kinds(c) & self._kinds[c.key].keys() for c in conditions)
