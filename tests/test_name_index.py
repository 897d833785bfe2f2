"""The operator-name index: a dry run validates without torch, with the same answers.

The index is written at the first dry run to a folder the test points at
(``PARAM_COMPUTE_NAME_INDEX_DIR``), keyed by torch's version; another version writes another
one and removes the old; an index that cannot be read counts as missing. Dry runs with and
without it write the same records and report the same problems.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import param_compute
from conftest import EXAMPLES, REPO, simple_op, tensor, write_spec
from param_compute.errors import SpecError
from param_compute.operators import name_index
from param_compute.runtime.toolchain import Toolchain

ADD_SCHEMA = str(torch.ops.aten.add.Tensor._schema)


@pytest.fixture
def index_dir(tmp_path, monkeypatch):
    folder = tmp_path / "names"
    monkeypatch.setenv("PARAM_COMPUTE_NAME_INDEX_DIR", str(folder))
    return folder


def _spec():
    """Names of every kind the index answers: a torch function, a built-in workload's
    operator, an nn Module, PARAM's in-place name, aten with and without a schema."""
    return {**simple_op("torch.nn.functional.gelu", tensor(4)),
            **simple_op("torch.mm", tensor(2, 3), tensor(3, 2)),  # a built-in workload's
            **simple_op("torch.nn.ReLU", tensor(3)),
            **simple_op("torch.mul_", tensor(2), tensor(2)),
            **simple_op("aten::add.Tensor", tensor(2), tensor(2),
                        builds=[{"args": [{"type": "str", "value": ADD_SCHEMA}]}]),
            **simple_op("aten::neg", tensor(2)),
            **simple_op("torch.special.expit", tensor(2))}


def test_first_dry_run_writes_the_index_and_later_ones_use_it(index_dir, monkeypatch):
    assert name_index.load_index() is None
    first = param_compute.run(_spec(), dry_run=True).records
    [path] = index_dir.glob("operator_names-*.json")
    assert name_index.torch_version() in path.name
    index = name_index.load_index()
    assert index.names["torch.nn.functional.gelu"] == "function"
    assert index.names["aten::add.Tensor"] == "aten" and index.names["torch.mul_"] == "inplace"
    assert "torch.mm" in index.builtin["operators"] and "torch.mm" not in index.names
    assert ADD_SCHEMA in index.aten_schemas
    started = []
    real_start = Toolchain.start.__func__

    def watched(cls, workloads_dirs=(), allow_namespaces=(), index=None):
        started.append(index is not None)
        return real_start(cls, workloads_dirs, allow_namespaces, index)

    monkeypatch.setattr(Toolchain, "start", classmethod(watched))
    again = param_compute.run(_spec(), dry_run=True).records
    assert started == [True]  # validated with the index, no built-in workloads loaded
    assert again == first
    assert [(r["op_name"], r["status"]) for r in again][:2] == [
        ("torch.nn.functional.gelu", "dry-run"), ("torch.mm", "dry-run")]


def test_another_torch_version_writes_another_index(index_dir, monkeypatch):
    param_compute.run(simple_op("torch.neg", tensor(2)), dry_run=True)
    [old] = index_dir.glob("operator_names-*.json")
    monkeypatch.setattr(name_index, "torch_version", lambda: "99.0.0+test")
    assert name_index.load_index() is None  # not this torch's
    param_compute.run(simple_op("torch.neg", tensor(2)), dry_run=True)
    [new] = index_dir.glob("operator_names-*.json")
    assert new != old and "99.0.0+test" in new.name
    assert name_index.load_index().torch_version == "99.0.0+test"


@pytest.mark.parametrize("damage", ["garbage", "other format", "wrong types", "link", "dir"])
def test_an_unreadable_index_counts_as_missing(index_dir, damage):
    param_compute.run(simple_op("torch.neg", tensor(2)), dry_run=True)
    [path] = index_dir.glob("operator_names-*.json")
    value = json.loads(path.read_text())
    path.unlink()
    if damage == "garbage":
        path.write_bytes(b"\x00{not json")
    elif damage == "other format":
        path.write_text(json.dumps(dict(value, format="something/else")))
    elif damage == "wrong types":
        path.write_text(json.dumps(dict(value, names={"torch.neg": 3})))
    elif damage == "link":
        (index_dir / "elsewhere.json").write_text(json.dumps(value))
        path.symlink_to(index_dir / "elsewhere.json")
    else:
        path.mkdir()
    assert name_index.load_index() is None
    [record] = param_compute.run(simple_op("torch.neg", tensor(2)), dry_run=True).records
    assert record["status"] == "dry-run"


@pytest.mark.parametrize("spec,message", [
    (simple_op("torch.ad", tensor(2)), "unknown operator 'torch.ad': torch has no 'ad'"),
    (simple_op("aten::add.Nope", tensor(2)), "aten::add has no overload 'Nope'"),
    (simple_op("aten::neg", tensor(2), builds=[{"args": [{"type": "str", "value": ADD_SCHEMA}]}]),
     "schema is for aten::add, not aten::neg"),
    (simple_op("fbgemm::foo", tensor(2)), "pass --allow-namespace fbgemm"),
])
def test_problems_read_the_same_with_and_without_the_index(index_dir, spec, message):
    with pytest.raises(SpecError) as without:
        param_compute.run(spec, dry_run=True)  # the first: writes the index
    assert name_index.load_index() is not None
    with pytest.raises(SpecError) as with_index:
        param_compute.run(spec, dry_run=True)
    assert str(with_index.value) == str(without.value)
    assert message in str(with_index.value)


def test_a_built_in_workload_s_iterator_needs_the_full_toolchain(index_dir):
    spec = json.loads((REPO / "tests" / "hostile_specs" / "tbe_batch_range_step_zero.json")
                      .read_text())
    index = name_index.build_index(Toolchain.start(), Toolchain.bare_registries())
    iterators = index.builtin["config_iterators"]
    assert "SplitTableBatchedEmbeddingBagsCodegenInputIterator" in iterators
    named = {op.get("input_iterator") for op in spec.values()}
    assert index.names_builtin_workloads(spec) == bool(named & iterators)
    assert index.names_builtin_workloads(
        {"torch.neg": {"input_iterator": next(iter(iterators)), "config": []}})
    assert not index.names_builtin_workloads(_spec())


def test_missing_kernels_are_reported_from_the_index(index_dir, caplog):
    schema = str(torch.ops.aten.cudnn_grid_sampler.default._schema)
    spec = {"aten::cudnn_grid_sampler": {"config": [{
        "build": [{"args": [{"type": "str", "value": schema}]}],
        "input": [{"args": [tensor(1, 1, 2, 2), tensor(1, 2, 2, 2)], "count": 2}]}]}}
    param_compute.run(simple_op("torch.neg", tensor(2)), dry_run=True)
    index = name_index.load_index()
    assert not index.kernel_of("cpu")("aten::cudnn_grid_sampler")
    assert index.kernel_of("cpu")("aten::add.Tensor")
    caplog.clear()
    param_compute.run(spec, dry_run=True)
    assert "aten::cudnn_grid_sampler: no kernel on cpu (1 configs, 2 calls): these runs will " \
           "fail" in caplog.text


def test_importtime_of_a_dry_run_shows_no_torch(tmp_path, index_dir):
    command = [sys.executable, "-X", "importtime", "-m", "param_compute.run_benchmark", "-c",
               str(EXAMPLES / "simple_add.json"), "--dry-run", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    first = subprocess.run(command + ["--output", str(tmp_path / "a.json")], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    second = subprocess.run(command + ["--output", str(tmp_path / "b.json")], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines()
                if line.startswith("import time:")]
    assert "param_compute.pipeline.session" in imported
    assert not [name for name in imported if name == "torch" or name.startswith("torch.")]
    first_lines = (tmp_path / "a.json").read_text().splitlines()
    second_lines = (tmp_path / "b.json").read_text().splitlines()
    assert first_lines[1] == second_lines[1]  # the same planned run


def test_built_in_workloads_a_script_imported_stay_out_of_the_bare_toolchain(index_dir,
                                                                              monkeypatch):
    """PARAM's scripts import the built-in workloads themselves (``load_modules``): their
    registrations must not leak into the toolchain without built-in workloads, or the index
    would lose the built-in names."""
    import importlib

    import param_compute.plugins.registry as registry
    from param_compute.plugins.loading import _builtin_workloads_package

    monkeypatch.setattr(registry, "_PROCESS_TABLES", registry.Registries())
    monkeypatch.setattr(registry, "_PROCESS_LOG", [])
    monkeypatch.setattr(registry, "_BUILTIN_LOGGED", set())
    package = _builtin_workloads_package().__name__
    importlib.reload(importlib.import_module(f"{package}.pytorch.native_basic_ops"))
    logged = [args[0] for kind, args in registry.process_registrations(builtin=True)
              if kind == "operator"]
    assert "torch.mm" in logged  # the script's import, outside any toolchain
    bare = Toolchain.bare_registries()
    assert "torch.mm" not in bare.operators
    index = name_index.build_index(Toolchain.start(), bare)
    assert "torch.mm" in index.builtin["operators"]
