"""PARAM's ``lib.generator``: repeatable Cartesian products of lists and tables of values.

``ListProduct([1, full_range(3, 5), IterableList(["a", "b"])])`` yields ``[1, 3, "a"]``,
``[1, 3, "b"]``, ``[1, 4, "a"]``... (the last position varies fastest); ``TableProduct`` does the
same for the values of a dict. A value whose type is one of ``iterable_types`` (``range``,
``IterableList``, ``ListProduct``, ``TableProduct``: exactly these types, as in PARAM) varies;
any other value (a list, a string, a number) is a constant. Products nest: a ``ListProduct``
inside a ``TableProduct`` is iterated afresh for every combination of the positions before it.

Every product can be iterated any number of times. As in PARAM, one iteration yields the *same*
list (or dict) object each time, updated in place: keep a copy (``copy.deepcopy``) of what you
keep. A ``TableProduct`` none of whose values varies yields its table itself, once; an empty
``ListProduct`` yields one empty list.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Sequence


def full_range(a: int, b: int, s: int = 1) -> range:
    """The inclusive range ``a <= x <= b`` by step ``s``: ``full_range(5, 11, 2)`` is 5, 7, 9,
    11."""
    return range(a, b + 1, s)


class IterableList:
    """A list that can be iterated again and again, and that products treat as varying."""

    def __init__(self, items: List[Any]):
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)


def _combinations(varying: Sequence[Any], values_of: Callable[[Any], Iterable[Any]],
                  assign: Callable[[Any, Any], None]) -> Iterator[None]:
    """Assign every combination of values to the ``varying`` slots, the last slot fastest,
    pausing (``yield``) at each complete one. A slot's values are iterated afresh each time
    the slots before it change (a nested product starts over)."""
    if not varying:
        yield
        return
    last = len(varying) - 1
    iterators = [iter(values_of(varying[0]))]
    while iterators:
        depth = len(iterators) - 1
        try:
            value = next(iterators[depth])
        except StopIteration:
            iterators.pop()
            continue
        assign(varying[depth], value)
        if depth == last:
            yield
        else:
            iterators.append(iter(values_of(varying[depth + 1])))


def _varies(value: Any) -> bool:
    return type(value) in iterable_types


class ListProduct:
    """The Cartesian product of a list's varying positions, constants kept in place."""

    def __init__(self, iter_list: List[Any]):
        self.iter_list: List[Any] = iter_list

    def __iter__(self) -> Iterator[List[Any]]:
        items = self.iter_list
        current = [None if _varies(item) else item for item in items]
        varying = [index for index, item in enumerate(items) if _varies(item)]
        return self._walk(current, varying)

    def _walk(self, current: List[Any], varying: List[int]) -> Iterator[List[Any]]:
        items = self.iter_list
        for _ in _combinations(varying, items.__getitem__, current.__setitem__):
            yield current


class TableProduct:
    """The Cartesian product of a dict's varying values, keyed as the dict, constants kept."""

    def __init__(self, table: Dict[Any, Any]):
        self.table: Dict[Any, Any] = table
        self.result: Dict[Any, Any] = {}

    def __iter__(self) -> Iterator[Dict[Any, Any]]:
        table = self.table
        self.result = {key: None if _varies(value) else value for key, value in table.items()}
        varying = [key for key, value in table.items() if _varies(value)]
        return self._walk(self.result, varying)

    def _walk(self, result: Dict[Any, Any], varying: List[Any]) -> Iterator[Dict[Any, Any]]:
        table = self.table
        if not varying:  # nothing varies: the table itself, once
            yield table
            return
        for _ in _combinations(varying, table.__getitem__, result.__setitem__):
            yield result


#: The types whose values vary in a product (exact types, not subclasses).
iterable_types = {range, IterableList, ListProduct, TableProduct}

__all__ = ["IterableList", "ListProduct", "TableProduct", "full_range", "iterable_types"]
