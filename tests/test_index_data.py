"""Integer data with a structure: embedding bags, pooling windows, zipf rows (spec.index_data).

Generated offsets obey embedding_bag's invariants for any sizes (property tests); captured
embedding_bag calls, forward and backward, replay on generated data for many shapes; max-pool
indices lie in their windows; zipf draws make hot rows.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch import nn

from param_compute.capture import capture_ops
from param_compute.capture.index_rules import index_rules
from param_compute.data.generator import DefaultDataGenerator, materialize, seed_generators
from param_compute.spec.index_data import (bags_problems, parse_distribution,
                                           pool_window_problems, structure_problems,
                                           window_spans)

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _bag_tensor(indices, bags, form, lengths="fixed"):
    shape = {"offsets": [bags], "offsets_with_end": [bags + 1], "offset2bag": [indices],
             "bag_size": [bags]}[form]
    spec = {"type": "tensor", "dtype": "long", "shape": shape,
            "bags": {"indices": indices, "bags": bags, "as": form, "lengths": lengths}}
    assert structure_problems(spec) == []
    return materialize(spec, "cpu")


bag_sizes = st.integers(1, 64).flatmap(lambda bags: st.tuples(st.integers(0, 400),
                                                               st.just(bags)))


@SETTINGS
@given(sizes=bag_sizes, lengths=st.sampled_from(["fixed", "uniform"]))
def test_generated_offsets_obey_embedding_bag_s_invariants(sizes, lengths):
    indices, bags = sizes
    offsets = _bag_tensor(indices, bags, "offsets", lengths)
    with_end = _bag_tensor(indices, bags, "offsets_with_end", lengths)
    offset2bag = _bag_tensor(indices, bags, "offset2bag", lengths)
    bag_size = _bag_tensor(indices, bags, "bag_size", lengths)
    assert offsets.dtype == torch.int64 and offsets.shape == (bags,)
    assert offsets[0] == 0 and bool((offsets[1:] >= offsets[:-1]).all())
    assert int(offsets[-1]) <= indices
    assert torch.equal(with_end[:-1], offsets) and int(with_end[-1]) == indices
    # the four views describe the same bags
    assert torch.equal(torch.diff(with_end), bag_size) and int(bag_size.sum()) == indices
    assert torch.equal(torch.bincount(offset2bag, minlength=bags), bag_size)
    if lengths == "fixed":  # the mean pooling factor, as evenly as can be
        assert int(bag_size.max()) - int(bag_size.min()) <= 1


def _replayed(spec_calls):
    """Each captured call's args materialized afresh and the op called on them."""
    ran = 0
    for op_name, entry in spec_calls.items():
        schema = entry["config"][0]["build"][0]["args"][0]["value"]
        name, _, overload = schema.split("(", 1)[0].partition("::")[2].partition(".")
        packet = getattr(torch.ops.aten, name)
        op = getattr(packet, overload or "default")
        for config in entry["config"]:
            for asl in config["input"]:
                args, kwargs = DefaultDataGenerator().get_data(asl, "cpu")
                op(*args, **kwargs)
                ran += 1
    return ran


@SETTINGS
@given(rows=st.integers(1, 300), dim=st.integers(1, 16), bags=st.integers(1, 24),
       pooling=st.integers(0, 12), mode=st.sampled_from(["sum", "mean", "max"]),
       include_last=st.booleans(), weighted=st.booleans(), padding=st.booleans(),
       sparse=st.booleans(), seed=st.integers(0, 2**16))
def test_captured_embedding_bag_replays_on_generated_data(rows, dim, bags, pooling, mode,
                                                          include_last, weighted, padding,
                                                          sparse, seed):
    torch.manual_seed(seed)
    total = bags * pooling
    weight = torch.randn(rows, dim, requires_grad=True)
    indices = torch.randint(0, rows, (total,))
    offsets = torch.arange(0, bags + include_last) * pooling
    per_sample = torch.rand(total, requires_grad=True) if weighted and mode == "sum" else None
    with capture_ops() as cap:
        out = nn.functional.embedding_bag(indices, weight, offsets, mode=mode,
                                          sparse=sparse and mode != "max",
                                          per_sample_weights=per_sample,
                                          include_last_offset=include_last,
                                          padding_idx=0 if padding else None)
        out.sum().backward()
    spec = {op: entry for op, entry in cap.spec().items() if "embedding_bag" in op}
    assert not [s for s in cap.skipped if "embedding_bag" in s.op]
    assert any("_embedding_bag" in op and "backward" not in op for op in spec)
    seed_generators(seed + 1)
    assert _replayed(spec) >= 2  # forward and backward, on generated (not captured) data
    backward = {op for op in spec if "backward" in op}
    if sparse and mode != "max" and total:
        assert "aten::_embedding_bag_sparse_backward" in backward or \
            "aten::_embedding_bag_backward" in backward
    if per_sample is not None and total:
        assert "aten::_embedding_bag_per_sample_weights_backward" in backward


def _pooled(size, kernel, stride, padding, dilation, ceil):
    """torch's pooled output size along one dim."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    out = (span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _window_ok(index, out_pos, size, kernel, stride, padding, dilation):
    offset = index + padding - out_pos * stride
    return 0 <= index < size and offset % dilation == 0 and 0 <= offset // dilation < kernel


@SETTINGS
@given(size=st.tuples(st.integers(1, 12), st.integers(1, 12)), kernel=st.integers(1, 4),
       stride=st.integers(1, 3), dilation=st.integers(1, 2), ceil=st.booleans(),
       seed=st.integers(0, 2**16), data=st.data())
def test_max_pool_backward_indices_lie_in_their_windows(size, kernel, stride, dilation, ceil,
                                                        seed, data):
    padding = data.draw(st.integers(0, kernel // 2))
    outs = [_pooled(n, kernel, stride, padding, dilation, ceil) for n in size]
    # Only windows with a tap inside the input: where a window lies wholly in the padding,
    # torch's own max_pool2d backward writes out of bounds (an abort), nothing to replay.
    window = {"input": list(size), "kernel": [kernel] * 2, "stride": [stride] * 2,
              "padding": [padding] * 2, "dilation": [dilation] * 2}
    assume(min(outs) > 0 and not any(count < 1 for axis, out in enumerate(outs)
                                     for _, count, _ in window_spans(window, axis, out)))
    image = torch.randn(1, 2, *size, requires_grad=True)
    with capture_ops() as cap:
        out = nn.functional.max_pool2d(image, kernel, stride, padding, dilation, ceil)
        out.sum().backward()
    entry = cap.spec()["aten::max_pool2d_with_indices_backward"]
    asl = entry["config"][0]["input"][0]
    [spec] = [a for a in asl["args"] if a.get("dtype") == "long"]
    assert "value_range" not in spec and spec["shape"] == [1, 2] + outs
    seed_generators(seed)
    indices = materialize(spec, "cpu")
    height, width = size
    out_h, out_w = indices.shape[-2:]
    for oh in range(out_h):
        for ow in range(out_w):
            for flat in indices[..., oh, ow].flatten().tolist():
                assert _window_ok(flat // width, oh, height, kernel, stride, padding, dilation)
                assert _window_ok(flat % width, ow, width, kernel, stride, padding, dilation)
    assert _replayed({"aten::max_pool2d_with_indices_backward": entry}) == 1


def test_zipf_makes_hot_rows_and_uniform_does_not():
    rows, draws = 1000, 50_000
    base = {"type": "tensor", "dtype": "long", "shape": [draws], "value_range": [0, rows - 1]}
    shares = {}
    for distribution in ("uniform", "zipf:1.2"):
        seed_generators(3)
        values = materialize({**base, "distribution": distribution}, "cpu")
        assert 0 <= int(values.min()) and int(values.max()) < rows
        counts = torch.bincount(values, minlength=rows).sort(descending=True).values
        shares[distribution] = float(counts[:10].sum()) / draws  # the hottest 1% of rows
    assert shares["uniform"] < 0.03
    assert shares["zipf:1.2"] > 0.4
    # hot rows are spread over the table, not its first rows
    seed_generators(3)
    values = materialize({**base, "distribution": "zipf:1.2"}, "cpu")
    hottest = torch.bincount(values, minlength=rows).topk(5).indices
    assert int(hottest.max()) - int(hottest.min()) > 100


def test_uniform_draws_are_the_same_as_before_the_distribution_key():
    spec = {"type": "tensor", "dtype": "long", "shape": [64], "value_range": [0, 9]}
    seed_generators(7)
    plain = materialize(spec, "cpu")
    seed_generators(7)
    named = materialize({**spec, "distribution": "uniform"}, "cpu")
    seed_generators(7)
    assert torch.equal(plain, named)
    assert torch.equal(plain, torch.randint(0, 10, (64,)))


@pytest.mark.parametrize("text, message", [
    ("zipf:0", "finite number > 0"), ("zipf:abc", "must be a number"), ("zipf", "unknown"),
    ("normal", "unknown distribution"), (3, "is \"uniform\" or"), ("zipf:inf", "finite")])
def test_bad_distributions_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_distribution(text)


def test_structure_checks_name_the_problem():
    assert bags_problems({"indices": -1, "bags": 2, "as": "offsets"}, [2]) == [
        (("indices",), "indices must be an integer >= 0, got -1")]
    assert bags_problems({"indices": 4, "bags": 0, "as": "offsets"}, [0]) == [
        (("bags",), "4 indices need at least one bag")]
    assert bags_problems({"indices": 4, "bags": 2, "as": "ends", "lenghts": 1}, [2])[0] == (
        ("lenghts",), "unknown key 'lenghts' (known: indices, bags, as, lengths)")
    assert pool_window_problems({"input": [4], "kernel": [0], "stride": [1], "padding": [0],
                                 "dilation": [1]}, [1, 4])[0][1].startswith("kernel must be")
    listed = {"type": "tensor", "dtype": "int", "shape": [2, 2], "values": [0, 1, 2]}
    assert structure_problems(listed)[0][:2] == (
        ("values",), "3 values for a tensor of shape [2, 2] (4 elements)")
    listed["values"] = [0, 1, 2, 1 << 40]
    assert structure_problems(listed)[0][:2] == (("values", 3),
                                                 "1099511627776 does not fit a int tensor")
    listed["values"] = [0, 1, 2, 3]
    assert structure_problems(listed) == []
    assert materialize(listed, "cpu").tolist() == [[0, 1], [2, 3]]
    float_bags = {"type": "tensor", "dtype": "float", "shape": [2],
                  "bags": {"indices": 4, "bags": 2, "as": "offsets"}}
    assert structure_problems(float_bags)[0][1] == "bags applies to integer tensors, not float"
    both = {"type": "tensor", "dtype": "long", "shape": [2], "value_range": [0, 3],
            "bags": {"indices": 4, "bags": 2, "as": "offsets"}}
    assert structure_problems(both)[0][:2] == (("value_range",), "value_range cannot be "
                                               "combined with bags, which decides the values "
                                               "(and a contiguous layout)")


def test_recorded_ranges_are_kept_and_offsets_get_their_structure():
    """A trace's integral range for indices wins; offsets get a bags view whatever was
    recorded (sorted offsets are not a range)."""
    named = {"weight": {"type": "tensor", "dtype": "float", "shape": [100, 4]},
             "indices": {"type": "tensor", "dtype": "long", "shape": [30],
                         "value_range": [5, 17]},
             "offsets": {"type": "tensor", "dtype": "long", "shape": [11],
                         "value_range": [0, 27]},
             "include_last_offset": {"type": "bool", "value": True}}
    assert index_rules("_embedding_bag", named) is None
    assert named["indices"]["value_range"] == [5, 17]
    assert named["offsets"] == {"type": "tensor", "dtype": "long", "shape": [11],
                                "bags": {"indices": 30, "bags": 10, "as": "offsets_with_end"}}
    empty = {"weight": named["weight"], "indices": named["indices"],
             "offsets": {"type": "tensor", "dtype": "long", "shape": [0]}}
    assert "no bag to hold them" in index_rules("_embedding_bag", empty)


def _tbe_step(rows, dim, batch, pooling):
    fbgemm = pytest.importorskip("fbgemm_gpu.split_table_batched_embeddings_ops_training")
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation

    tbe = fbgemm.SplitTableBatchedEmbeddingBagsCodegen(
        [(r, dim, EmbeddingLocation.HOST, fbgemm.ComputeDevice.CPU) for r in rows],
        optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1)
    indices = torch.cat([torch.randint(0, r, (batch * pooling,)) for r in rows])
    offsets = torch.arange(0, len(rows) * batch * pooling + 1, pooling)
    tbe(indices, offsets).sum().backward()  # warm-up, outside the capture
    with capture_ops(allow_namespaces=["fbgemm"]) as cap:
        tbe(indices, offsets).sum().backward()
    return cap


@pytest.mark.parametrize("rows", [[100, 200, 300], [64, 64]])
def test_fbgemm_tbe_calls_replay_on_rebuilt_tables_that_pass_fbgemm_s_bounds_check(rows):
    cap = _tbe_step(rows, dim=8, batch=4, pooling=3)
    spec = cap.spec()
    assert not [s for s in cap.skipped if s.op.startswith("fbgemm::")]
    [lookup] = [op for op in spec if op.startswith("fbgemm::split_embedding_codegen_")]
    args = spec[lookup]["config"][0]["input"][0]["args"]
    tables = len(rows)
    total_rows = sum(rows)
    split = [total_rows // tables + (t < total_rows % tables) for t in range(tables)]
    cumsum = [sum(split[:t]) for t in range(tables + 1)]
    values = [a.get("values") for a in args if isinstance(a, dict)]
    assert [8 * t for t in range(tables + 1)] in values  # D_offsets
    assert cumsum in values  # hash_size_cumsum: the rows split evenly
    [indices] = [a for a in args if isinstance(a, dict) and a.get("shape") == [tables * 12]]
    assert indices["value_range"][1] <= min(split) - 1
    # fbgemm's own bounds check finds nothing to fix in the generated data
    check = spec["fbgemm::bounds_check_indices"]["config"][0]["input"][0]
    seed_generators(5)
    made, _ = DefaultDataGenerator().get_data(check, "cpu")
    before = made[1].clone()
    torch.ops.fbgemm.bounds_check_indices(*made)
    assert int(made[4].sum()) == 0 and torch.equal(made[1], before)
    for op in spec:  # and every captured fbgemm call runs on its generated data
        if op.startswith("fbgemm::"):
            schema = spec[op]["config"][0]["build"][0]["args"][0]["value"]
            name = schema.split("(", 1)[0].split("::", 1)[1]
            fn = getattr(torch.ops.fbgemm, name.split(".")[0])
            made, kwargs = DefaultDataGenerator().get_data(spec[op]["config"][0]["input"][0],
                                                           "cpu")
            fn(*made, **kwargs)


def test_tables_of_different_widths_are_refused_with_the_reason():
    from param_compute.capture.tbe_rules import tbe_rule

    long = {"type": "tensor", "dtype": "long"}
    named = {"D_offsets": {**long, "dtype": "int", "shape": [3]},
             "hash_size_cumsum": {**long, "shape": [3]},
             "host_weights": {"type": "tensor", "dtype": "float", "shape": [96]},
             "total_D": {"type": "int", "value": 12}, "max_D": {"type": "int", "value": 8},
             "indices": {**long, "shape": [10]}, "offsets": {**long, "shape": [5]}}
    assert "tables of different widths" in tbe_rule(named)
    named["total_D"]["value"] = 16
    assert tbe_rule(named) is None
    assert named["hash_size_cumsum"]["values"] == [0, 6, 12]  # 96 / 8 rows in two tables
    assert named["offsets"]["bags"] == {"indices": 10, "bags": 4, "as": "offsets_with_end"}
    named["B_offsets"] = {**long, "shape": [3]}
    assert "B_offsets" in tbe_rule(named)


def test_a_pt2_lookup_s_packed_weights_list_gets_its_placements_and_offsets():
    """The execution trace's ``split_embedding_codegen_lookup_*_function_pt2`` passes
    ``weights`` as a list ``[flat weights, placements, offsets]``."""
    from param_compute.capture.tbe_rules import HOST, tbe_rule

    long = {"type": "tensor", "dtype": "long"}
    packed = {"type": "genericlist", "value": [
        {"type": "tensor", "dtype": "float", "shape": [9600]},
        {"type": "tensor", "dtype": "int", "shape": [3]}, {**long, "shape": [3]}]}
    named = {"weights": packed, "D_offsets": {**long, "dtype": "int", "shape": [4]},
             "total_D": {"type": "int", "value": 48}, "max_D": {"type": "int", "value": 16},
             "hash_size_cumsum": {**long, "shape": [4]},
             "indices": {**long, "shape": [120], "value_range": [3, 599]},
             "offsets": {**long, "shape": [25], "value_range": [0, 120]}}
    assert tbe_rule(named) is None
    assert packed["value"][1]["values"] == [HOST] * 3  # a CPU tensor: host placement
    assert packed["value"][2]["values"] == [0, 3200, 6400]
    assert named["D_offsets"]["values"] == [0, 16, 32, 48]
    assert named["hash_size_cumsum"]["values"] == [0, 200, 400, 600]
    # the recorded range is cut to what every rebuilt table holds
    assert named["indices"]["value_range"] == [3, 199]
    assert named["offsets"] == {**long, "shape": [25],
                                "bags": {"indices": 120, "bags": 24, "as": "offsets_with_end"}}
    for spec in (packed["value"][1], named["D_offsets"], named["offsets"]):
        assert structure_problems(spec) == []


@SETTINGS
@given(size=st.tuples(st.integers(1, 14), st.integers(1, 14)),
       out=st.tuples(st.integers(1, 6), st.integers(1, 6)), seed=st.integers(0, 2**16))
def test_adaptive_max_pool_backward_indices_lie_in_their_adaptive_windows(size, out, seed):
    from param_compute.operators.unsafe import unsafe_reason

    image = torch.randn(1, 3, *size, requires_grad=True)
    with capture_ops() as cap:
        nn.functional.adaptive_max_pool2d(image, out).sum().backward()
    entry = cap.spec()["aten::adaptive_max_pool2d_backward"]
    asl = entry["config"][0]["input"][0]
    [spec] = [a for a in asl["args"] if a.get("dtype") == "long"]
    assert spec["pool_window"] == {"input": list(size), "adaptive": True}
    assert unsafe_reason("aten::adaptive_max_pool2d_backward", asl,
                         "PyTorch:DefaultDataGenerator") is None  # proved in bounds
    seed_generators(seed)
    indices = materialize(spec, "cpu")
    (height, width), (out_h, out_w) = size, out
    for oh in range(out_h):
        for ow in range(out_w):
            for flat in indices[..., oh, ow].flatten().tolist():
                h, w = divmod(flat, width)
                assert oh * height // out_h <= h < -(-(oh + 1) * height // out_h)
                assert ow * width // out_w <= w < -(-(ow + 1) * width // out_w)
    assert _replayed({"aten::adaptive_max_pool2d_backward": entry}) == 1
