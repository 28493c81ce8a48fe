"""The metadata keys the embedded store has held, with the kinds of their values, so a filter that can match no stored
value is answered empty without the engine: a condition on a key no item holds (a typo), or one asking a string of
a key that holds numbers, makes qdrant-edge check every point, even with a payload index: 140-280 ms at 100k points,
under the lock every search waits on (docs/operations.md, "Indexed filters").

Kinds are only ever added (a delete does not remove them), so the census may hold more than the items do: a filter
it lets through is searched as before, and one it stops could have matched no item. Only the embedded store keeps
one: it sees every write, where a Qdrant server is written by every replica.
Written by hand: a dict of sets, fed by the store's writes."""

from __future__ import annotations

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
    """Every metadata key written, with the kinds of value written under it."""

    def __init__(self) -> None:
        self._kinds: dict[str, set[str]] = {}

    def add(self, metadata: Iterable[Mapping[str, object]]) -> None:
        for one in metadata:
            for key, value in one.items():
                self._kinds.setdefault(key, set()).update(value_kinds(value))

    def matches_nothing(self, conditions: Sequence[Condition]) -> bool:
        """Whether no stored item can meet all the conditions: one of them wants a kind its key never held."""
        return any(not wanted_kinds(c) & self._kinds.get(c.key, set()) for c in conditions)
