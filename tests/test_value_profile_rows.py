"""Zeros laid out as whole rows: ``value_profile.zero_rows`` captured, validated and generated.

A capture writes the share of all-zero rows where most zeros lie in such rows (Adam's state of
embedding rows never looked up) and not for zeros scattered element by element; the generator
zeroes that share of whole rows at random, seeded places and keeps the overall fractions; bad
values are refused naming their JSON path.
"""

from __future__ import annotations

import json

import pytest
import torch

from conftest import run_cli
from param_compute.capture.live.value_profile import value_profile
from param_compute.errors import SpecError, format_json_path
from param_compute.results.file import read_results
from param_compute.data.generator import materialize, seed_generators
from param_compute.runtime.toolchain import Toolchain
from param_compute.spec.float_data import profile_of

SQRT = "aten::sqrt(Tensor self) -> Tensor"


def _rows_zeroed(rows, cols, share, seed=0):
    """A (rows, cols) tensor of ordinary values with ``share`` of its rows, at random, zero."""
    gen = torch.Generator().manual_seed(seed)
    tensor = torch.rand(rows, cols, generator=gen) + 0.5
    tensor[torch.randperm(rows, generator=gen)[:round(share * rows)]] = 0
    return tensor


def _zero_rows(tensor):
    return float((tensor.detach() == 0).flatten(1).all(1).float().mean())


def test_capture_writes_zero_rows_for_whole_zero_rows_only():
    assert value_profile(_rows_zeroed(1000, 64, 0.7)) == {
        "zeros": 0.7, "subnormal": 0.0, "zero_rows": 0.7}
    mixed = _rows_zeroed(1000, 64, 0.5)
    mixed[500:, ::5] = 0  # plus a fifth of the elements of half the rows (some already 0)
    profile = value_profile(mixed)
    assert profile["zero_rows"] == 0.5 and 0.55 <= profile["zeros"] <= 0.6
    scattered = torch.rand(1000, 64) + 0.5
    scattered[torch.rand(1000, 64, generator=torch.Generator().manual_seed(1)) < 0.94] = 0
    profile = value_profile(scattered)  # 2% of rows all zero by chance: no key
    assert sorted(profile) == ["subnormal", "zeros"] and abs(profile["zeros"] - 0.94) < 0.005
    few_rows = torch.rand(1000, 64) + 0.5
    few_rows[:100] = 0
    few_rows[100:, :32] = 0  # 55% zeros, only 10% as whole rows: no key
    assert value_profile(few_rows) == {"zeros": 0.55, "subnormal": 0.0}
    column = torch.zeros(1000, 1)
    column[:300] = 1.0  # rows of one element are elements: no key
    assert value_profile(column) == {"zeros": 0.7, "subnormal": 0.0}
    assert value_profile(torch.zeros(50, 8)) == {"zeros": 1.0, "subnormal": 0.0}
    assert value_profile(_rows_zeroed(1000, 64, 0.7).view(-1)) == {"zeros": 0.7,
                                                                    "subnormal": 0.0}


@pytest.mark.parametrize("shape", [(10000, 256), (64, 40000)])
def test_zero_rows_of_a_huge_tensor_are_counted_on_its_sample(shape):
    table = _rows_zeroed(*shape, 0.94, seed=2)
    profile = value_profile(table)  # sampled: every k-th row, or every k-th column
    assert abs(profile["zero_rows"] - 0.94) <= 0.02 and profile["zero_rows"] == profile["zeros"]


def test_profile_of_writes_zero_rows_where_most_zeros_are_in_them():
    assert profile_of(0.7, 0.0, 0.36) == {"zeros": 0.7, "subnormal": 0.0, "zero_rows": 0.36}
    assert profile_of(0.7, 0.0, 0.34) == {"zeros": 0.7, "subnormal": 0.0}
    assert profile_of(0.005, 0.0, 0.005) is None  # zeros not significant
    assert profile_of(0.0, 0.01, 0.0) == {"zeros": 0.0, "subnormal": 0.01}
    assert profile_of(0.99996, 0.0, 0.99995) == {"zeros": 0.99996, "subnormal": 0.0,
                                                 "zero_rows": 0.99995}
    assert profile_of(0.62449, 0.0, 0.62449)["zero_rows"] == 0.62  # rounded like zeros


@pytest.mark.parametrize("shape, stride", [([500, 40], None), ([200, 4, 25], None),
                                           ([500, 40], [1, 500])])
def test_the_generator_zeroes_whole_rows_and_keeps_the_fractions(shape, stride):
    profile = {"zeros": 0.7, "subnormal": 0.02, "zero_rows": 0.5}
    spec = {"type": "tensor", "dtype": "float", "shape": shape, "value_profile": profile}
    if stride:
        spec["stride"] = stride
    seed_generators(11)
    tensor = materialize(spec, "cpu").detach()
    assert list(tensor.shape) == shape and (stride is None or list(tensor.stride()) == stride)
    rows = (tensor == 0).flatten(1).all(1)
    assert int(rows.sum()) == shape[0] // 2  # round(0.5 x rows), exactly
    assert abs(float((tensor == 0).float().mean()) - 0.7) < 0.015
    tiny = torch.finfo(tensor.dtype).tiny
    subnormal = float(((tensor.abs() < tiny) & (tensor != 0)).float().mean())
    assert abs(subnormal - 0.02) < 0.006
    at = rows.nonzero().view(-1)
    assert int(at.min()) < shape[0] // 10 and int(at.max()) > shape[0] * 9 // 10  # spread
    assert value_profile(tensor)["zero_rows"] == 0.5
    seed_generators(11)
    assert torch.equal(materialize(spec, "cpu").detach(), tensor)  # seeded: the same data
    seed_generators(12)
    assert not torch.equal((materialize(spec, "cpu").detach() == 0).flatten(1).all(1), rows)


def test_all_zeros_as_rows_and_zero_rows_of_zero_draw_as_without_the_key():
    spec = {"type": "tensor", "dtype": "half", "shape": [300, 16],
            "value_profile": {"zeros": 0.94, "zero_rows": 0.94}}
    seed_generators(3)
    tensor = materialize(spec, "cpu").detach()
    assert _zero_rows(tensor) == pytest.approx(282 / 300)
    assert float((tensor == 0).float().mean()) == pytest.approx(282 / 300)  # no other zeros
    plain = {"type": "tensor", "dtype": "float", "shape": [64, 8],
             "value_profile": {"zeros": 0.3, "subnormal": 0.1}}
    seed_generators(7)
    without = materialize(plain, "cpu")
    seed_generators(7)
    with_zero = materialize({**plain, "value_profile": {**plain["value_profile"],
                                                        "zero_rows": 0}}, "cpu")
    assert torch.equal(without, with_zero)


def test_a_copied_one_dim_shape_fails_the_data_not_silently():
    spec = {"type": "tensor", "dtype": "float", "shape": [40],
            "value_profile": {"zeros": 0.5, "zero_rows": 0.5}}
    with pytest.raises(ValueError, match=r"value_profile.zero_rows applies to tensors of at "
                                         r"least 2 dims, not shape \[40\]"):
        materialize(spec, "cpu")


def _sqrt_spec(tensor_spec):
    return {"aten::sqrt": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                           "build_data_generator": "PyTorch:DefaultDataGenerator",
                           "config": [{"build": [{"args": [{"type": "str", "value": SQRT}]}],
                                       "input": [{"args": [tensor_spec]}]}]}}


@pytest.mark.parametrize("tensor_spec, words", [
    ({"shape": [8, 4], "value_profile": {"zeros": 0.5, "zero_rows": 1.5}},
     "zero_rows is a fraction in [0, 1], got 1.5"),
    ({"shape": [8, 4], "value_profile": {"zeros": 0.5, "zero_rows": "all"}},
     "zero_rows is a fraction in [0, 1], got 'all'"),
    ({"shape": [8, 4], "value_profile": {"zeros": 0.5, "zero_rows": 0.6}},
     "zero_rows is 0.6, more than zeros (0.5): the zeros of all-zero rows are among the zeros"),
    ({"shape": [8, 4], "value_profile": {"zero_rows": 0.25}},
     "zero_rows is 0.25, more than zeros (0)"),
    ({"shape": [8], "value_profile": {"zeros": 0.5, "zero_rows": 0.5}},
     "zero_rows applies to tensors of at least 2 dims (rows along dim 0), not shape [8]"),
    ({"shape": [[8, 4], [8]], "__list__": ["shape"],
      "value_profile": {"zeros": 0.5, "zero_rows": 0.5}},
     "zero_rows applies to tensors of at least 2 dims (rows along dim 0), not shape [8]"),
])
def test_bad_zero_rows_are_refused_naming_their_json_path(tmp_path, tensor_spec, words):
    path = tmp_path / "bad.json"
    spec = _sqrt_spec({"type": "tensor", "dtype": "float", **tensor_spec})
    if "__list__" in tensor_spec:
        spec["aten::sqrt"]["input_iterator"] = "RangeConfigIterator"
    path.write_text(json.dumps(spec))
    with pytest.raises(SpecError) as info:
        Toolchain.start().load(path)
    found = [(format_json_path(p.path), p.message) for p in info.value.problems]
    assert ("aten::sqrt.config[0].input[0].args[0].value_profile.zero_rows", words) in \
        [(at, message[:len(words)]) for at, message in found], found
    assert str(path) in info.value.render()


def test_a_spec_with_zero_rows_loads_and_runs(tmp_path):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(_sqrt_spec({
        "type": "tensor", "dtype": "float", "shape": [100, 16],
        "value_profile": {"zeros": 0.94, "subnormal": 0.0, "zero_rows": 0.94}})))
    out = tmp_path / "r.json"
    done = run_cli("-c", path, "-i", "2", "--output", out)
    assert done.returncode == 0, done.stderr
    [record] = read_results(out).records
    assert record["op_name"] == "aten::sqrt" and record["status"] == "ok"
