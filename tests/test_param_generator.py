"""PARAM's ``lib.generator`` at its module path: full_range, IterableList, ListProduct,
TableProduct, with PARAM's semantics (checked side by side with PARAM's own module where
../shared/param-src is beside the checkout)."""

from __future__ import annotations

import copy
import importlib.util

import pytest

from conftest import REPO
from param_compute.lib import generator
from param_compute.lib.generator import IterableList, ListProduct, TableProduct, full_range

PARAM_GENERATOR = (REPO.parent / "shared" / "param-src" / "param_bench" / "train" / "compute"
                   / "python" / "lib" / "generator.py")


def _kept(product):
    return [copy.deepcopy(item) for item in product]


def test_full_range_is_inclusive():
    assert list(full_range(-2, 1)) == [-2, -1, 0, 1]
    assert list(full_range(4, 10, 3)) == [4, 7, 10]
    assert list(full_range(4, 11, 3)) == [4, 7, 10]
    assert list(full_range(5, 4)) == [] and isinstance(full_range(1, 2), range)


def test_iterable_list_iterates_again_and_again():
    items = IterableList(["x", 3])
    assert list(items) == ["x", 3] and list(items) == ["x", 3]


def test_list_product_varies_the_last_position_fastest_keeping_constants():
    product = ListProduct(["a", full_range(1, 2), 0.5, IterableList([10, 20, 30])])
    expected = [["a", i, 0.5, j] for i in (1, 2) for j in (10, 20, 30)]
    assert _kept(product) == expected
    assert _kept(product) == expected  # repeatable
    assert _kept(ListProduct([])) == [[]]
    assert _kept(ListProduct([1, "s", [2, 3]])) == [[1, "s", [2, 3]]]  # a list is a constant
    assert _kept(ListProduct([range(0)])) == []  # an empty axis: no combination


def test_products_nest_and_restart_inner_products():
    inner = ListProduct([7, full_range(1, 2)])
    table = TableProduct({"k": IterableList(["p", "q"]), "c": None})
    got = _kept(ListProduct([inner, table]))
    assert got == [[[7, i], {"k": k, "c": None}] for i in (1, 2) for k in ("p", "q")]
    nested = _kept(TableProduct({"a": 1, "b": TableProduct({"c": full_range(1, 3)})}))
    assert nested == [{"a": 1, "b": {"c": c}} for c in (1, 2, 3)]


def test_one_iteration_yields_one_object_updated_in_place():
    seen = list(ListProduct([full_range(1, 3)]))
    assert len(seen) == 3 and all(item is seen[0] for item in seen) and seen[0] == [3]
    tables = list(TableProduct({"x": full_range(1, 2)}))
    assert tables[0] is tables[1] and tables[0] == {"x": 2}


def test_table_product_without_varying_values_yields_the_table_once():
    table = {"a": 1, "b": "two"}
    [only] = list(TableProduct(table))
    assert only is table
    assert list(TableProduct({})) == [{}]


def test_only_the_exact_iterable_types_vary():
    class MyRange(IterableList):
        pass

    assert generator.iterable_types == {range, IterableList, ListProduct, TableProduct}
    odd = MyRange([1, 2])
    assert _kept(ListProduct([odd]))[0][0] is not None  # a constant: the object itself
    assert len(_kept(ListProduct([odd]))) == 1


def _param_module():
    if not PARAM_GENERATOR.is_file():
        pytest.skip("../shared/param-src is not beside this checkout")
    spec = importlib.util.spec_from_file_location("param_lib_generator", PARAM_GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(g):
    """The same inputs, built from one module's classes (the type check is exact)."""
    return [
        g.ListProduct([1, g.full_range(3, 5), 2, g.full_range(7, 13, 3)]),
        g.ListProduct([1, g.ListProduct([2, g.full_range(3, 5)]), 6.7,
                       g.TableProduct({"A": g.ListProduct([6, g.full_range(2, 7, 2)]),
                                       "B": g.IterableList(["s1", "s2"])}), "s3"]),
        g.ListProduct([]),
        g.ListProduct([g.IterableList([]), 1]),
        g.TableProduct({"A": 1, "B": g.full_range(3, 5), "C": 2, "D": g.full_range(7, 13, 3)}),
        g.TableProduct({"A": 1, "B": g.ListProduct([3, g.full_range(4, 5)]), "C": 2,
                        "D": g.TableProduct({"E": g.full_range(7, 9), "F": 10})}),
        g.TableProduct({}),
        g.TableProduct({"only": "constants", "n": [1, 2]}),
        g.IterableList([2, 4, 6, 8]),
    ]


def test_same_results_as_params_own_generator():
    theirs = _param_module()
    for mine, param in zip(_cases(generator), _cases(theirs)):
        assert _kept(mine) == _kept(param)
        assert _kept(mine) == _kept(param)  # the second iteration too
    for a, b, s in [(-3, 2, 1), (5, 11, 2), (3, 11, 3), (4, 3, 1)]:
        assert list(full_range(a, b, s)) == list(theirs.full_range(a, b, s))
