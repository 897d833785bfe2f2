"""The built-in workloads: native operator table, whole models, fbgemm table-batched embeddings.

Operators are obtained through the registry, the way the engine gets them, and driven through the
same life cycle (device, build, bind_forward, forward for backward, create_grad, backward, cleanup).
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from param_compute.plugins.registry import Registries, filling
from param_compute.runtime.toolchain import Toolchain
from param_compute.workloads.pytorch import alex_net, native_basic_ops, resnet
from param_compute.workloads.pytorch import split_table_batched_embeddings_ops as tbe

REGISTRIES = Toolchain.start().registries  # one toolchain's, as the engine gets them

SHARED_CONFIGS = Path(__file__).resolve().parents[1].parent / "shared" / "param-configs"
TBE = "SplitTableBatchedEmbeddingBagsCodegen"


def new_operator(name, device="cpu"):
    op = REGISTRIES.operators[name]()
    op.device = device
    return op


def run_forward_backward(op, args):
    """Forward through the bound callable, then one backward as the engine runs it."""
    output = op.bind_forward(args, {})()
    op.remember_output(output)
    op.create_grad()
    op.backward()
    return output


# --- native operators -----------------------------------------------------------------------

def _t(*shape):
    return torch.randn(*shape)


# name -> (build args, call args); covers exactly the registered table.
NATIVE_CASES = {
    "torch.add": ([], lambda: [_t(4, 4), _t(4, 4)]),
    "torch.baddbmm": ([], lambda: [_t(2, 3, 5), _t(2, 3, 4), _t(2, 4, 5)]),
    "torch.bmm": ([], lambda: [_t(2, 3, 4), _t(2, 4, 5)]),
    "torch.cat": ([], lambda: [[_t(2, 3), _t(4, 3)]]),
    "torch.matmul": ([], lambda: [_t(3, 4), _t(4, 5)]),
    "torch.mean": ([], lambda: [_t(4, 4)]),
    "torch.mm": ([], lambda: [_t(3, 4), _t(4, 5)]),
    "torch.mul": ([], lambda: [_t(4, 4), _t(4, 4)]),
    "torch.nn.functional.relu": ([], lambda: [_t(4, 4)]),
    "torch.reshape": ([], lambda: [_t(4, 4), (2, 8)]),
    "torch.add_": ([], lambda: [_t(4, 4), _t(4, 4)]),
    "torch.clamp_": ([], lambda: [_t(4, 4) * 20, 0, 10]),
    "torch.nn.AdaptiveAvgPool2d": ([(2, 2)], lambda: [_t(1, 3, 8, 8)]),
    "torch.nn.Conv2d": ([3, 4, 3], lambda: [_t(1, 3, 8, 8)]),
    "torch.nn.Dropout": ([0.5], lambda: [_t(1, 3, 8, 8)]),
    "torch.nn.MaxPool2d": ([2], lambda: [_t(1, 3, 8, 8)]),
    "torch.nn.ReLU": ([], lambda: [_t(1, 3, 8, 8)]),
    "torch.nn.Linear": ([4, 5], lambda: [_t(3, 4)]),
}


def test_native_table_covers_params_native_set():
    registered = (set(native_basic_ops.CALLABLE_OPS) | set(native_basic_ops.INPLACE_OPS)
                  | set(native_basic_ops.MODULE_OPS))
    assert registered == set(NATIVE_CASES)
    assert registered <= set(REGISTRIES.operators)


@pytest.mark.parametrize("name", sorted(NATIVE_CASES))
def test_native_operator_runs(name):
    build_args, make_args = NATIVE_CASES[name]
    op = new_operator(name)
    assert op is not REGISTRIES.operators[name]()  # a fresh object per build
    op.build(*build_args)
    args = make_args()
    expected = None
    if name in native_basic_ops.CALLABLE_OPS:
        expected = native_basic_ops.CALLABLE_OPS[name](*args)
    elif name in native_basic_ops.INPLACE_OPS:
        expected = getattr(args[0].clone(), native_basic_ops.INPLACE_OPS[name])(*args[1:])
    output = op.bind_forward(args, {})()
    assert isinstance(output, torch.Tensor)
    if expected is not None:
        torch.testing.assert_close(output, expected)
    if name in native_basic_ops.INPLACE_OPS:
        assert output.data_ptr() == args[0].data_ptr()  # it updated its first argument
    op.cleanup()


# --- whole models ----------------------------------------------------------------------------

def parameter_count(model_class, *args):
    with torch.device("meta"):  # shapes only: no allocation, no weight initialization
        return sum(p.numel() for p in model_class(*args).parameters())


def test_model_parameter_counts_match_torchvision():
    assert parameter_count(alex_net.AlexNet) == 61_100_840
    assert parameter_count(resnet.ResNet) == 25_557_032  # ResNet-50, PARAM's default
    assert parameter_count(resnet.ResNet, 18) == 11_689_512
    assert parameter_count(resnet.ResNet, 101) == 44_549_160
    with pytest.raises(ValueError, match="depth"):
        resnet.ResNet(42)


@pytest.mark.parametrize("name", ["pytorch.model.alex_net", "pytorch.model.resnet"])
def test_model_forward_backward(name):
    torch.manual_seed(0)
    op = new_operator(name)
    op.build()  # the specs' empty build entry
    x = torch.randn(2, 3, 224, 224)
    output = run_forward_backward(op, [x])
    assert output.shape == (2, 1000)
    grads = [p.grad for p in op.module.parameters()]
    assert all(g is not None for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    op.cleanup()
    assert op.module is None


# --- SplitTableBatchedEmbeddingBagsCodegen ---------------------------------------------------

def build_values(build):
    """Materialize a build arg-spec-list the way the engine does: plain Python values."""
    return ([arg["value"] for arg in build["args"]],
            {key: arg["value"] for key, arg in build.get("kwargs", {}).items()})


def arg(name, type_, value, **meta):
    return dict({"name": name, "type": type_, "value": value}, **meta)


def table_build(num_tables, rows, dim, weighted, precision="fp32", pooling=0):
    return {"args": [arg("num_tables", "int", num_tables), arg("rows", "int", rows),
                     arg("dim", "int", dim), arg("pooling", "int", pooling),
                     arg("weighted", "bool", weighted), arg("weights_precision", "str", precision)],
            "kwargs": {"optimizer": {"type": "str", "value": "exact_row_wise_adagrad"}}}


def iterate_inputs(build, inputs):
    configs = {"build": build, "input": inputs}
    return list(tbe.SplitTableBatchedEmbeddingBagsCodegenInputIterator(configs, "input", "cpu"))


def shared_tbe_case():
    spec_path = SHARED_CONFIGS / "split_table_batched_embeddings_ops.json"
    expected_path = SHARED_CONFIGS / "expected" / "split_table_batched_embeddings_ops.expected.jsonl"
    if not (spec_path.exists() and expected_path.exists()):
        pytest.skip(f"shared PARAM configs not found at {SHARED_CONFIGS}")
    spec = json.loads(spec_path.read_text())[TBE]
    expected = [json.loads(line) for line in expected_path.read_text().splitlines() if line.strip()]
    return spec, expected


def test_tbe_plugins_registered():
    assert REGISTRIES.config_iterators["SplitTableBatchedEmbeddingBagsCodegenInputIterator"] \
        is tbe.SplitTableBatchedEmbeddingBagsCodegenInputIterator
    assert REGISTRIES.data_generators["SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator"] \
        is tbe.SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator


def test_tbe_input_iterator_matches_param_on_shared_spec():
    spec, expected = shared_tbe_case()
    assert len(expected) == 1
    build = expected[0]["config"]["build"]  # what the engine hands over: expanded, macro-free
    produced = iterate_inputs(build, spec["config"][0]["input"])
    assert [(f"0|0_0|{input_id}", config) for input_id, config in produced] == \
        [(expected[0]["id"], expected[0]["config"]["input"])]
    assert tbe.SplitTableBatchedEmbeddingBagsCodegenInputIterator.count(
        {"input": spec["config"][0]["input"]}, "input") == 1


def test_tbe_input_iterator_expands_range_and_list():
    build = table_build(2, [100, 200], 8, weighted=True)
    inputs = [
        {"args": [arg("batch_size", "int", [128, 512, 128], __range__=["value"]),
                  arg("pooling_factor", "int", [10, 50], __list__=["value"])]},
        {"args": [arg("batch_size", "int", 4), arg("pooling_factor", "int", [1, 3], __range__=["value"])]},
    ]
    produced = iterate_inputs(build, inputs)
    assert [input_id for input_id, _ in produced] == [f"0_{i}" for i in range(8)] + ["1_0", "1_1", "1_2"]
    pairs = [(config["args"][3]["value"], config["args"][4]["value"]) for _, config in produced]
    assert pairs[:8] == [(b, p) for b in (128, 256, 384, 512) for p in (10, 50)]  # batch outermost
    assert pairs[8:] == [(4, 1), (4, 2), (4, 3)]
    for _, config in produced:
        assert [a["name"] for a in config["args"]] == ["num_tables", "rows", "dim", "batch_size",
                                                       "pooling_factor", "weighted", "weights_precision"]
        assert config["kwargs"] == {}
        assert not any(key.startswith("__") for a in config["args"] for key in a)
    assert tbe.SplitTableBatchedEmbeddingBagsCodegenInputIterator.count({"input": inputs}, "input") == 11


def test_tbe_input_iterator_rejects_bad_specs():
    with pytest.raises(ValueError, match="build config"):
        iterate_inputs(None, [])
    build = table_build(1, 10, 4, weighted=False)
    with pytest.raises(ValueError, match="two args"):
        iterate_inputs(build, [{"args": [arg("batch_size", "int", 4)]}])
    with pytest.raises(ValueError, match="__range__"):
        iterate_inputs(build, [{"args": [arg("batch_size", "int", 4, __range__=["value"]),
                                         arg("pooling_factor", "int", 2)]}])


def generate(build, batch_size, pooling_factor, seed=0):
    [(_, config)] = iterate_inputs(build, [{"args": [arg("batch_size", "int", batch_size),
                                                     arg("pooling_factor", "int", pooling_factor)]}])
    torch.manual_seed(seed)
    return tbe.SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator().get_data(config, "cpu")


def test_tbe_data_generator_layout_and_determinism():
    build = table_build(2, [100, 7], [8, 4], weighted=True)
    (indices, offsets, weights), kwargs = generate(build, batch_size=5, pooling_factor=[3, 2])
    assert kwargs == {}
    assert indices.dtype == offsets.dtype == torch.int64
    assert indices.shape == (5 * 3 + 5 * 2,)
    assert offsets.tolist() == [0, 3, 6, 9, 12, 15, 17, 19, 21, 23, 25]  # table-major bags
    assert indices[:15].max() < 100 and indices[15:].max() < 7 and indices.min() >= 0
    assert weights.shape == indices.shape and weights.dtype == torch.float32
    (again, _, _), _ = generate(build, batch_size=5, pooling_factor=[3, 2])
    assert torch.equal(indices, again)
    (_, _, no_weights), _ = generate(table_build(1, 10, 4, weighted=False), 2, 2)
    assert no_weights is None


def test_tbe_operator_on_shared_spec_cpu():
    pytest.importorskip("fbgemm_gpu")
    spec, expected = shared_tbe_case()
    build = expected[0]["config"]["build"]
    [(_, input_config)] = iterate_inputs(build, spec["config"][0]["input"])
    torch.manual_seed(0)
    args, kwargs = tbe.SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator().get_data(input_config, "cpu")
    op = new_operator(TBE)
    build_args, build_kwargs = build_values(build)
    op.build(*build_args, **build_kwargs)
    touched = args[0][:10]
    before = op.op.split_embedding_weights()[0][touched].clone()
    output = run_forward_backward(op, args)
    assert output.shape == (512, 128)  # [batch_size, dim * num_tables]
    assert output.dtype == torch.float32
    # The backward pass runs the fused exact_row_wise_adagrad update on the rows it read.
    assert not torch.equal(op.op.split_embedding_weights()[0][touched], before)
    op.cleanup()
    assert op.op is None


def test_tbe_operator_weighted_multi_table_cpu():
    pytest.importorskip("fbgemm_gpu")
    build = table_build(3, [50, 60, 70], [8, 4, 12], weighted=True, precision="fp16")
    args, _ = generate(build, batch_size=6, pooling_factor=[2, 3, 1])
    op = new_operator(TBE)
    build_args, build_kwargs = build_values(build)
    op.build(*build_args, **build_kwargs)
    output = run_forward_backward(op, args)
    assert output.shape == (6, 8 + 4 + 12)
    with pytest.raises(ValueError, match="cpu or cuda"):
        new_operator(TBE, device="meta").build(*build_args, **build_kwargs)


def test_tbe_without_fbgemm_registers_iterator_and_generator_only(monkeypatch):
    """A missing fbgemm_gpu leaves the operator declared unavailable, and nothing raises."""
    monkeypatch.setitem(sys.modules, "fbgemm_gpu", None)
    fresh = Registries()
    spec = importlib.util.spec_from_file_location("tbe_without_fbgemm", tbe.__file__)
    module = importlib.util.module_from_spec(spec)
    with filling(fresh):
        spec.loader.exec_module(module)
    assert TBE not in fresh.operators
    assert "pip install fbgemm-gpu-cpu==1.8.0" in fresh.unavailable_operators[TBE]
    assert set(fresh.config_iterators) == {"SplitTableBatchedEmbeddingBagsCodegenInputIterator"}
    assert set(fresh.data_generators) == {"SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator"}
