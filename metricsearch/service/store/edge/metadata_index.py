"""An in-process index of the embedded store's metadata: per key, the kinds of value held and each item's value by its
row (VectorRows'), so a filter is answered in process where the engine would read every point.

- A filter that can match no stored value (a key no item holds, a typo, a key whose items were all deleted, a string
  asked of a key that holds numbers) makes qdrant-edge check every point, even with a payload index: 140-280 ms at
  100k points, under the lock every search waits on. Each key's kinds are counted by the items holding them, so
  `matches_nothing` answers that at once.
- A filter on a key without a payload index makes the engine read each point's payload as it meets it: seconds at
  100k items (exact.py). `matching` finds the rows meeting it from columns instead: a key held by many items keeps its
  values as numpy arrays over the rows (a number as itself, a boolean as 0 or 1, a string as a code), so a
  condition costs a vectorised pass; a key held by few keeps them in a dict, checked in Python. Lists of strings are
  kept aside and checked in Python.

A delete or a replacing write takes the old item's metadata away (the store passes it from VectorRows), so
the index holds what the items hold now. Only the embedded store keeps one: it sees every write, where a Qdrant
server is written by every replica.
Written by hand: no library keeps mutable per-key value columns with the engine's filter rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from metricsearch.core.filters import AnyOf, Condition, Equals
from metricsearch.service.store.payload import value_kinds

DENSE_MIN = 1024
DENSE_SHARE = 16
"""A key's values move to arrays over every row once more than max(DENSE_MIN, rows / DENSE_SHARE) items hold it: the
arrays cost 9 bytes a row, so at most about 150 bytes an item holding the key, as much as a dict entry, while a key
held by a few items in a large catalog would pay for every row."""
_NONE, _NUMBER, _BOOL, _STRING, _LIST = range(5)
_NUMBERS = (int, float)
_KIND_OF_TYPE = {int: _NUMBER, float: _NUMBER, bool: _BOOL, str: _STRING, list: _LIST}
_KIND_NAMES = {int: "float", float: "float", bool: "bool", str: "keyword"}
"""payload.value_kinds of a scalar by its type, without building a set for each value."""


def wanted_kinds(condition: Condition) -> set[str]:
    """The kinds of stored value (payload.value_kinds) a condition can match: those of its own values, since a string
    matches strings, a number numbers (2 equals 2.0) and a boolean booleans; a range numbers only."""
    if isinstance(condition, Equals):
        return value_kinds(condition.value)
    if isinstance(condition, AnyOf):
        return set().union(*map(value_kinds, condition.values))
    return {"float"}


def served_by_indexes(conditions: Sequence[Condition], indexes: Mapping[str, str]) -> bool:
    """Whether a payload index ({key: type}) serves every condition: one on its key whose type holds every kind of
    value it can match (a string `in` on a float index is checked point by point)."""
    return all(c.key in indexes and wanted_kinds(c) <= {indexes[c.key]} for c in conditions)


def test_of(condition: Condition) -> Callable[[object], bool]:
    """Whether a stored metadata value meets the condition, as the engine decides: numbers by value (2 equals 2.0),
    never a boolean as a number; a string equals a string or any element of a list of strings; a range holds
    numbers only; a missing value or null meets nothing."""
    if isinstance(condition, Equals):
        wanted = condition.value
        if isinstance(wanted, bool):
            return lambda value: type(value) is bool and value is wanted
        if isinstance(wanted, str):
            return lambda value: value == wanted or (type(value) is list and wanted in value)
        return lambda value: type(value) in _NUMBERS and value == wanted
    if isinstance(condition, AnyOf):
        strings = {v for v in condition.values if isinstance(v, str)}
        numbers = {v for v in condition.values if not isinstance(v, str)}
        return lambda value: (
            (type(value) is str and value in strings)
            or (type(value) in _NUMBERS and value in numbers)
            or (type(value) is list and not strings.isdisjoint(value))
        )
    low = -np.inf if condition.gte is None else condition.gte
    high = np.inf if condition.lte is None else condition.lte
    return lambda value: type(value) in _NUMBERS and low <= value <= high


class _Column:
    """One key's values by row: a dict {row: value} while few items hold it, else arrays (`kinds`, `values`) over every
    row with the strings as codes, and the lists of strings aside ({row: set of strings})."""

    def __init__(self) -> None:
        self.held = 0
        self.sparse: dict[int, object] | None = {}
        self.kinds = np.zeros(0, dtype=np.int8)
        self.values = np.zeros(0, dtype=np.float64)
        self.lists: dict[int, frozenset[str]] = {}
        self.codes: dict[str, int] = {}
        self.strings: dict[int, str] = {}
        self.uses: Counter[int] = Counter()
        self._next_code = 0

    def set(self, rows: Sequence[int], values: Sequence[object]) -> None:
        """The values of rows that hold none (a row given once)."""
        self.held += len(rows)
        if self.sparse is not None:
            self.sparse.update(zip(rows, values, strict=True))
            return
        if max(rows) >= len(self.kinds):
            self._grow(max(rows) + 1)
        kinds, numbers = [], []
        for row, value in zip(rows, values, strict=True):
            kind = _KIND_OF_TYPE.get(type(value), _NONE)  # null or an object: nothing matches it
            kinds.append(kind)
            if kind == _STRING:
                numbers.append(self._code(value))
            elif kind == _LIST:
                self.lists[row] = frozenset(value)
                numbers.append(0)
            else:
                numbers.append(value if kind != _NONE else 0)
        at = np.asarray(rows, dtype=np.int64)
        self.kinds[at] = kinds
        self.values[at] = numbers

    def clear(self, rows: Sequence[int]) -> None:
        """Take the values of rows away (each given once)."""
        self.held -= len(rows)
        if self.sparse is not None:
            for row in rows:
                self.sparse.pop(row, None)
            return
        at = np.asarray(rows, dtype=np.int64)
        kinds = self.kinds[at]
        for code in self.values[at[kinds == _STRING]].tolist():
            self._release(int(code))
        for row in at[kinds == _LIST].tolist():
            del self.lists[row]
        self.kinds[at] = _NONE

    def make_dense(self, rows: int) -> None:
        sparse, self.sparse = self.sparse or {}, None
        self._grow(rows)
        self.held -= len(sparse)
        if sparse:
            self.set(list(sparse), list(sparse.values()))

    def matching(self, condition: Condition, rows: np.ndarray | None) -> np.ndarray:
        """The rows (among `rows`, all when None) whose value meets the condition, ascending."""
        if self.sparse is not None:
            test = test_of(condition)
            if rows is None or len(rows) > len(self.sparse):
                found = [row for row, value in self.sparse.items() if test(value)]
                found = np.sort(np.fromiter(found, dtype=np.int64, count=len(found)))
                return found if rows is None else found[np.isin(found, rows, assume_unique=True)]
            get = self.sparse.get
            return np.fromiter((row for row in rows.tolist() if test(get(row))), dtype=np.int64)
        if rows is None:  # every row: the columns themselves, not copies gathered by an index of every row
            kinds, values = self.kinds, self.values
        else:
            rows = rows[rows < len(self.kinds)]
            kinds, values = self.kinds[rows], self.values[rows]
        met = self._met(condition, kinds, values)
        if self.lists and (strings := _strings_of(condition)):
            listed = np.flatnonzero(kinds == _LIST)
            at = listed if rows is None else rows[listed]
            met[listed] = [not strings.isdisjoint(self.lists[row]) for row in at.tolist()]
        return np.flatnonzero(met) if rows is None else rows[met]

    def _met(self, condition: Condition, kinds: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Whether each scalar value meets the condition (the engine's rules, as test_of states them)."""
        if isinstance(condition, Equals):
            wanted = condition.value
            if isinstance(wanted, bool):
                return (kinds == _BOOL) & (values == float(wanted))
            if isinstance(wanted, str):
                code = self.codes.get(wanted)
                return (kinds == _STRING) & (values == code) if code is not None else np.zeros(len(kinds), bool)
            return (kinds == _NUMBER) & (values == wanted)
        if isinstance(condition, AnyOf):
            numbers = [v for v in condition.values if not isinstance(v, str)]
            codes = [self.codes[v] for v in condition.values if isinstance(v, str) and v in self.codes]
            return ((kinds == _NUMBER) & np.isin(values, numbers)) | ((kinds == _STRING) & np.isin(values, codes))
        low = -np.inf if condition.gte is None else condition.gte
        high = np.inf if condition.lte is None else condition.lte
        return (kinds == _NUMBER) & (values >= low) & (values <= high)

    def _code(self, string: str) -> int:
        code = self.codes.get(string)
        if code is None:
            code = self.codes[string] = self._next_code
            self.strings[code] = string
            self._next_code += 1
        self.uses[code] += 1
        return code

    def _release(self, code: int) -> None:
        self.uses[code] -= 1
        if not self.uses[code]:
            del self.uses[code], self.codes[self.strings.pop(code)]

    def _grow(self, rows: int) -> None:
        size = max(rows, 2 * len(self.kinds), DENSE_MIN)
        self.kinds = np.concatenate([self.kinds, np.zeros(size - len(self.kinds), dtype=np.int8)])
        self.values = np.concatenate([self.values, np.zeros(size - len(self.values))])


def _by_key(rows: Iterable[int], metadata: Iterable[Mapping[str, object]]) -> dict[str, tuple[list[int], list[object]]]:
    """Each key's rows and values, so a write's items are counted and stored a key at a time."""
    by_key: dict[str, tuple[list[int], list[object]]] = {}
    for row, one in zip(rows, metadata, strict=True):
        for key, value in one.items():
            held = by_key.get(key)
            if held is None:
                held = by_key[key] = ([], [])
            held[0].append(row)
            held[1].append(value)
    return by_key


def _kinds_of(values: Iterable[object]) -> list[str]:
    """The kind of each value (payload.value_kinds), one entry per kind a list holds."""
    kinds = []
    for value in values:
        kind = _KIND_NAMES.get(type(value))
        if kind is not None:
            kinds.append(kind)
        else:
            kinds.extend(value_kinds(value))
    return kinds


def _strings_of(condition: Condition) -> frozenset[str]:
    """The strings a condition asks for, which an element of a list of strings can equal."""
    if isinstance(condition, Equals):
        return frozenset([condition.value]) if isinstance(condition.value, str) else frozenset()
    if isinstance(condition, AnyOf):
        return frozenset(v for v in condition.values if isinstance(v, str))
    return frozenset()


class MetadataIndex:
    """Every metadata key the items hold, with how many items hold each kind of value under it, and each item's value
    by row (VectorRows')."""

    def __init__(self) -> None:
        self._kinds: dict[str, Counter[str]] = {}
        self._columns: dict[str, _Column] = {}
        self._rows = 0

    def add(self, rows: Iterable[int], metadata: Iterable[Mapping[str, object]]) -> None:
        """Items' metadata at their rows (each row given once, and cleared first by `remove`)."""
        for key, (key_rows, values) in _by_key(rows, metadata).items():
            self._rows = max(self._rows, max(key_rows) + 1)
            self._kinds.setdefault(key, Counter()).update(_kinds_of(values))
            column = self._columns.get(key)
            if column is None:
                column = self._columns[key] = _Column()
            column.set(key_rows, values)
            if column.sparse is not None and column.held > max(DENSE_MIN, self._rows // DENSE_SHARE):
                column.make_dense(self._rows)

    def remove(self, rows: Iterable[int], metadata: Iterable[Mapping[str, object]]) -> None:
        """Take away items' metadata as `add` counted it: a kind no item holds any more leaves, and a key with it."""
        for key, (key_rows, values) in _by_key(rows, metadata).items():
            column = self._columns.get(key)
            if column is not None:
                column.clear(key_rows)
                if not column.held:
                    del self._columns[key]
            held = self._kinds.get(key)
            if held is None:
                continue
            for kind, count in Counter(_kinds_of(values)).items():
                if kind in held:
                    held[kind] -= count
                    if held[kind] <= 0:
                        del held[kind]
            if not held:
                del self._kinds[key]

    def matches_nothing(self, conditions: Sequence[Condition]) -> bool:
        """Whether no stored item can meet all the conditions: one of them wants a kind its key does not hold."""
        return any(c.key not in self._kinds or not wanted_kinds(c) & self._kinds[c.key].keys() for c in conditions)

    def matching(self, conditions: Sequence[Condition]) -> np.ndarray:
        """The rows of the items meeting every condition (at least one), ascending: the key held by the fewest items
        is looked at first, and each further condition only at the rows still in."""
        if self.matches_nothing(conditions):
            return np.zeros(0, dtype=np.int64)
        rows = None
        for condition in sorted(conditions, key=lambda c: self._columns[c.key].held):
            rows = self._columns[condition.key].matching(condition, rows)
            if not len(rows):
                break
        return rows
