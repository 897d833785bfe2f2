"""Float tensors with many zeros or subnormals: the captured ``value_profile`` and its replay.

A live capture (``--run``) writes the profile of a mostly-zero input and none for ordinary
values; the generator reproduces the fractions in every floating dtype, on strided tensors too;
a spec without the key generates what it did before; bad profiles are refused naming their
JSON path; a step replay's generated external inputs carry the profile. Signs too: a trained
net's weights are about half negative, and the default draw in [0, 1) is all positive (a
UNet's max-pool then ran 2x faster in the step replay than in production).
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from conftest import run_cli
from param_compute.capture.live.dispatch import capture_ops
from param_compute.capture.live.value_profile import sample, value_profile
from param_compute.errors import SpecError, format_json_path
from param_compute.data.generator import materialize, seed_generators
from param_compute.runtime.toolchain import Toolchain
from param_compute.spec.float_data import profile_of, round_fraction

SQRT = "aten::sqrt(Tensor self) -> Tensor"


def _sqrt_spec(tensor_spec):
    return {"aten::sqrt": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                           "build_data_generator": "PyTorch:DefaultDataGenerator",
                           "config": [{"build": [{"args": [{"type": "str", "value": SQRT}]}],
                                       "input": [{"args": [tensor_spec]}]}]}}


def _fractions(tensor):
    tiny = torch.finfo(tensor.dtype).tiny
    magnitude = tensor.detach().abs()
    return (float((tensor == 0).float().mean()),
            float(((magnitude < tiny) & (magnitude > 0)).float().mean()))


def test_capture_run_writes_the_profile_of_a_mostly_zero_input(tmp_path):
    (tmp_path / "adam_like.py").write_text(textwrap.dedent("""
        import torch
        state = torch.zeros(1000, 64)   # rows never touched stay exactly 0
        state[:380] = torch.rand(380, 64) + 0.5
        ordinary = torch.rand(1000, 64) + 0.5

        def step():
            state.sqrt()
            ordinary.sqrt()
    """))
    spec_path = tmp_path / "out.json"
    result = run_cli("--run", "adam_like:step", "-o", spec_path,
                     module="param_compute.cli.capture", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    spec = json.loads(spec_path.read_text())
    inputs = [i["args"][0] for c in spec["aten::sqrt"]["config"] for i in c["input"]]
    assert len(inputs) == 2  # the two inputs differ only in their profile: two configs
    profiles = sorted((a.get("value_profile") for a in inputs), key=lambda p: p is not None)
    # the untouched rows are whole rows of zeros: zero_rows says so
    assert profiles == [None, {"zeros": 0.62, "subnormal": 0.0, "zero_rows": 0.62}]
    out = tmp_path / "results.json"
    assert run_cli("-c", spec_path, "--output", out, "-i", "2").returncode == 0


def test_capture_profiles_subnormals_rounds_and_leaves_ordinary_tensors_alone():
    x = torch.rand(200, 50) + 0.1
    x.view(-1)[:37] = 0  # 0.37% zeros: not significant
    x.view(-1)[100:100 + 123] = 1e-40  # 1.23% subnormal
    before = x.clone()
    assert value_profile(x) == {"zeros": 0.0, "subnormal": 0.012}
    assert torch.equal(x, before)
    assert value_profile(torch.rand(64) + 0.5) is None
    assert value_profile(torch.zeros(0)) is None
    assert value_profile(torch.zeros(3, dtype=torch.long)) is None
    with capture_ops() as cap:
        torch.zeros(4, 4, dtype=torch.float16).mul(2)
    [config] = cap.spec()["aten::mul"]["config"]
    assert config["input"][0]["args"][0]["value_profile"] == {"zeros": 1.0, "subnormal": 0.0}
    assert [round_fraction(v) for v in (0.6249, 0.0123456, 0.999, 0.99990, 0.99996, 1.0, 0.0,
                                        0.5, 0.9512)] == [
        0.62, 0.012, 0.999, 0.9999, 0.99996, 1.0, 0.0, 0.5, 0.951]
    assert profile_of(0.009, 0.0009) is None


def test_huge_tensors_are_counted_on_a_strided_sample_of_at_most_the_limit():
    table = torch.zeros(3000, 700)
    table[::2] = 1.0  # every other row touched
    view = sample(table, limit=100_000)
    assert view.numel() <= 100_000 and view.data_ptr() == table.data_ptr()  # a view, no copy
    assert sample(table[:, :3], limit=100_000).shape == (3000, 3)
    zeros, _ = _fractions(view)
    assert 0.4 < zeros < 0.6


@pytest.mark.parametrize("dtype", ["float", "half", "bfloat16", "double"])
def test_the_generator_reproduces_the_fractions(dtype):
    spec = {"type": "tensor", "dtype": dtype, "shape": [400, 250],
            "value_profile": {"zeros": 0.62, "subnormal": 0.05}}
    seed_generators(5)
    tensor = materialize(spec, "cpu")
    zeros, subnormal = _fractions(tensor)
    assert abs(zeros - 0.62) < 0.01 and abs(subnormal - 0.05) < 0.005
    rest = tensor.detach()[tensor.detach().abs() >= torch.finfo(tensor.dtype).tiny]
    assert float(rest.min()) >= 0 and float(rest.max()) <= 1  # the others as before
    seed_generators(5)
    assert torch.equal(materialize(spec, "cpu"), tensor)  # seeded: the same data
    zeros_at = (tensor == 0).view(-1).nonzero().view(-1)
    assert int(zeros_at.min()) < 1000 and int(zeros_at.max()) > 99_000  # spread out


def test_a_strided_tensor_gets_the_profile_over_its_storage():
    spec = {"type": "tensor", "dtype": "float", "shape": [300, 200], "stride": [1, 300],
            "value_profile": {"zeros": 0.5}}
    seed_generators(1)
    tensor = materialize(spec, "cpu")
    assert tensor.stride() == (1, 300)
    assert abs(_fractions(tensor)[0] - 0.5) < 0.02


def test_a_spec_without_the_key_generates_exactly_as_before():
    plain = {"type": "tensor", "dtype": "float", "shape": [64, 8], "value_range": [-2, 3]}
    seed_generators(7)
    generated = materialize(plain, "cpu")
    seed_generators(7)
    assert torch.equal(generated, torch.rand(64, 8).mul_(5).add_(-2))
    seed_generators(7)
    zero_profile = materialize({**plain, "value_profile": {"zeros": 0, "subnormal": 0}}, "cpu")
    assert torch.equal(zero_profile, generated)


@pytest.mark.parametrize("tensor_spec, where, words", [
    ({"dtype": "float", "value_profile": {"zeros": 1.5}}, "args[0].value_profile.zeros",
     "zeros is a fraction in [0, 1], got 1.5"),
    ({"dtype": "float", "value_profile": {"subnormal": -0.1}},
     "args[0].value_profile.subnormal", "subnormal is a fraction in [0, 1], got -0.1"),
    ({"dtype": "float", "value_profile": {"zeros": 0.7, "subnormal": 0.4}},
     "args[0].value_profile", "zeros + subnormal is 1.1, more than 1"),
    ({"dtype": "float", "value_profile": {"zeros": 0.6, "negative": 0.5}},
     "args[0].value_profile", "zeros + negative is 1.1, more than 1"),
    ({"dtype": "float", "value_profile": {"negative": 2}},
     "args[0].value_profile.negative", "negative is a fraction in [0, 1], got 2"),
    ({"dtype": "long", "value_profile": {"zeros": 0.5}}, "args[0].value_profile",
     "value_profile applies to floating tensors, not long"),
    ({"dtype": "float", "value_profile": {"zero": 0.5}}, "args[0].value_profile.zero",
     "unknown key 'zero'"),
    ({"dtype": "float", "value_profile": [0.5]}, "args[0].value_profile",
     "expected object, got array"),
    ({"dtype": "float", "value_profile": {"zeros": "0.5"}}, "args[0].value_profile.zeros",
     "zeros is a fraction in [0, 1], got '0.5'"),
])
def test_bad_profiles_are_refused_naming_their_json_path(tmp_path, tensor_spec, where, words):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_sqrt_spec({"type": "tensor", "shape": [4], **tensor_spec})))
    with pytest.raises(SpecError) as info:
        Toolchain.start().load(path)
    found = [(format_json_path(p.path), p.message) for p in info.value.problems]
    assert any(where in at and words in message for at, message in found), found
    assert str(path) in info.value.render()


def test_step_replay_generates_external_inputs_with_the_profile(tmp_path):
    from test_step_replay import _replay

    state = torch.zeros(500, 40)
    state[:100] = torch.rand(100, 40) + 0.5
    with capture_ops() as cap:
        state.sqrt().mul(2)
    cap.write(tmp_path / "step.json")
    replay = _replay(tmp_path / "step.json")
    [external] = replay.externals.values()
    assert abs(_fractions(external)[0] - 0.8) < 0.03


@pytest.mark.parametrize("key, value", [
    ("value_profile", {"zeros": 0.5}), ("distribution", "uniform"), ("values", [1]),
    ("stride", [1]), ("bags", {}), ("pool_window", {}), ("storage_offset", 0)])
def test_a_tensor_data_key_on_a_scalar_arg_is_refused_not_ignored(tmp_path, key, value):
    spec = {"torch.add": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                          "config": [{"input": [{"args": [
                              {"type": "tensor", "dtype": "float", "shape": [4]},
                              {"type": "float", "value": 1.0, key: value}]}]}]}}
    path = tmp_path / "scalar.json"
    path.write_text(json.dumps(spec))
    done = run_cli("-c", path, "--dry-run", "--output", tmp_path / "r.json")
    assert done.returncode == 2
    assert f"{path}: torch.add.config[0].input[0].args[1].{key}: {key} applies to tensor args, " \
           "not to 'float' (drop it)" in done.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_profile_on_a_ranged_dtype_is_checked_for_each_dtype(tmp_path):
    spec = _sqrt_spec({"type": "tensor", "shape": [4], "dtype": ["float", "long"],
                       "__range__": ["dtype"], "value_profile": {"zeros": 0.5}})
    spec["aten::sqrt"]["input_iterator"] = "RangeConfigIterator"
    path = tmp_path / "ranged.json"
    path.write_text(json.dumps(spec))
    done = run_cli("-c", path, "--dry-run", "--output", tmp_path / "r.json")
    assert done.returncode == 2
    assert f"{path}: aten::sqrt.config[0].input[0].args[0].value_profile: value_profile " \
           "applies to floating tensors, not long (use a floating dtype" in done.stderr


def test_a_profile_on_a_dtype_copied_from_an_integer_arg_fails_the_run_not_silently(tmp_path):
    spec = {"torch.add": {"input_iterator": "RangeConfigIterator",
                          "input_data_generator": "PyTorch:DefaultDataGenerator",
                          "config": [{"input": [{"args": [
                              {"type": "tensor", "dtype": "long", "shape": [4]},
                              {"type": "tensor", "shape": [4], "__copy__": [{"dtype": 0}],
                               "value_profile": {"zeros": 0.5}}]}]}]}}
    path = tmp_path / "copied.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "r.json"
    done = run_cli("-c", path, "-i", "2", "--output", out)
    assert done.returncode == 1
    assert "torch.add|0|0|0_0 failed in data: ValueError: value_profile applies to floating " \
           "tensors, not long (its dtype copied from another arg by __copy__?)" in done.stderr
    assert "failed torch.add|0|0|0_0 (data): ValueError: value_profile applies" in done.stdout
    [line] = [json.loads(x) for x in out.read_text().splitlines() if '"op_name"' in x]
    assert line["status"] == "error" and line["error"]["phase"] == "data"


def test_capture_writes_the_share_of_negatives_coarsely_and_only_where_it_counts():
    torch.manual_seed(0)
    assert value_profile(torch.randn(300, 40)) == {"zeros": 0.0, "subnormal": 0.0,
                                                   "negative": 0.5}
    assert value_profile(torch.rand(100_000) - 0.8) == {"zeros": 0.0, "subnormal": 0.0,
                                                        "negative": 0.8}
    few = torch.rand(1000)
    few[:20] = -1  # 2%: below the threshold, written as nothing
    assert value_profile(few) is None
    relu_like = torch.randn(1000).clamp(min=0)  # half zeros, no negatives
    assert "negative" not in value_profile(relu_like)
    # rounded to NEGATIVE_STEP (calls differing by sampling noise fold into one config), and
    # never more than zeros and subnormals leave
    assert profile_of(0, 0, None, 0.474) == {"zeros": 0.0, "subnormal": 0.0, "negative": 0.45}
    assert profile_of(0.96, 0, None, 0.04) == {"zeros": 0.96, "subnormal": 0.0,
                                               "negative": 0.04}
    assert profile_of(0, 0, None, 0.02) is None


def test_the_generator_reproduces_signs_beside_zeros_subnormals_and_zero_rows():
    spec = {"type": "tensor", "dtype": "float", "shape": [500, 200],
            "value_profile": {"zeros": 0.2, "subnormal": 0.1, "negative": 0.35}}
    seed_generators(3)
    tensor = materialize(spec, "cpu").detach()
    zeros, subnormal = _fractions(tensor)
    assert abs(zeros - 0.2) < 0.01 and abs(subnormal - 0.1) < 0.01
    assert abs(float((tensor < 0).float().mean()) - 0.35) < 0.01
    assert float((tensor[tensor < 0]).max()) <= -torch.finfo(torch.float).tiny  # ordinary
    rows = {**spec, "value_profile": {"zeros": 0.5, "zero_rows": 0.4, "negative": 0.25}}
    tensor = materialize(rows, "cpu").detach()
    assert abs(float((tensor == 0).float().mean()) - 0.5) < 0.01
    assert int(tensor.eq(0).all(1).sum()) == 200
    assert abs(float((tensor < 0).float().mean()) - 0.25) < 0.01


def test_a_live_capture_of_a_conv_replays_its_weights_with_their_signs(tmp_path):
    """A trained conv's weights are half negative: replayed all positive, they smoothed the
    conv's output (neighbours correlated 0.88) and the max-pool after it ran 2x faster."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    with capture_ops() as cap:
        torch.nn.functional.max_pool2d(conv(torch.randn(2, 3, 16, 16)), 2)
    [config] = cap.spec()["aten::convolution"]["config"]
    image, weight = config["input"][0]["args"][:2]
    assert image["value_profile"]["negative"] == 0.5
    assert 0.4 <= weight["value_profile"]["negative"] <= 0.6  # 216 weights
    seed_generators(1)
    made = materialize(weight, "cpu").detach()
    assert 0.3 < float((made < 0).float().mean()) < 0.7
    out = torch.nn.functional.conv2d(materialize(image, "cpu").detach(), made, padding=1)
    neighbours = torch.corrcoef(torch.stack([out[..., :-1].flatten(), out[..., 1:].flatten()]))
    assert float(neighbours[0, 1]) < 0.5  # not the smooth field all-positive weights make
