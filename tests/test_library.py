"""Library use: ``param_compute.run`` leaves the caller's process as it found it.

Threads, Python's / torch's / numpy's random states come back as they were after every run, and
each run's toolchain has its own plugin registries: plugin folders of one run are not seen by
the next, and a plugin module Python imported once still registers in a later toolchain.
"""

from __future__ import annotations

import random
import sys
import textwrap

import numpy as np
import pytest
import torch

import param_compute
import param_compute.plugins.registry as registry
from conftest import simple_op, tensor
from param_compute.errors import SpecError

PLUGIN = textwrap.dedent("""
    import torch
    from param_compute import OperatorInterface, register_operator

    FACTOR = {factor}
    CALLS = []  # (factor, torch threads, a draw from Python's random) per forward call

    class Scale(OperatorInterface):
        def forward(self, x):
            import random
            CALLS.append((FACTOR, torch.get_num_threads(), random.random()))
            return x * FACTOR

    register_operator("test.scale", Scale)
    {extra}
""")


def plugin_dir(path, factor, extra=""):
    path.mkdir()
    (path / "plugin_ops.py").write_text(PLUGIN.format(factor=factor, extra=extra))
    return path


def plugin_module(directory):
    """The module Python made of ``directory``'s plugin file (imported once per process)."""
    [module] = [m for m in list(sys.modules.values())
                if getattr(m, "__file__", None) == str((directory / "plugin_ops.py").resolve())]
    return module


def _caller_state():
    return (torch.get_num_threads(), random.getstate(), torch.get_rng_state(),
            np.random.get_state())


def _assert_unchanged(before):
    threads, python, torch_rng, numpy_rng = before
    assert torch.get_num_threads() == threads
    assert random.getstate() == python
    assert torch.equal(torch.get_rng_state(), torch_rng)
    now = np.random.get_state()
    assert now[0] == numpy_rng[0] and np.array_equal(now[1], numpy_rng[1])
    assert now[2:] == numpy_rng[2:]


@pytest.fixture
def caller_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_two_runs_leave_threads_rng_and_plugins_as_found(tmp_path, caller_threads):
    dir_a = plugin_dir(tmp_path / "a", 2, extra='register_operator("test.only_a", Scale)')
    dir_b = plugin_dir(tmp_path / "b", 3)
    spec = simple_op("test.scale", tensor(4))
    torch.set_num_threads(3)
    random.seed(11)
    torch.manual_seed(11)
    np.random.seed(11)

    before = _caller_state()
    first = param_compute.run({**spec, **simple_op("test.only_a", tensor(4))},
                              workloads_dirs=[dir_a], num_threads=1, seed=5)
    assert [r["status"] for r in first.records] == ["ok", "ok"]
    _assert_unchanged(before)
    module_a = plugin_module(dir_a)
    # during the run: its own thread count, its own seeding
    assert {threads for _, threads, _ in module_a.CALLS} == {1}
    assert {factor for factor, _, _ in module_a.CALLS} == {2}

    random.random()  # the caller moves on between runs
    torch.rand(3)
    before = _caller_state()
    second = param_compute.run(spec, workloads_dirs=[dir_b], num_threads=2, seed=5)
    assert [r["status"] for r in second.records] == ["ok"]
    _assert_unchanged(before)
    module_b = plugin_module(dir_b)
    assert {(factor, threads) for factor, threads, _ in module_b.CALLS} == {(3, 2)}
    # the same seed gives the same data: the run's draws do not depend on the caller's state
    assert module_b.CALLS[0][2] == module_a.CALLS[0][2]

    # the second toolchain does not see the first one's plugins
    with pytest.raises(SpecError, match="test.only_a"):
        param_compute.run(simple_op("test.only_a", tensor(4)), workloads_dirs=[dir_b])
    with pytest.raises(SpecError, match="test.scale"):
        param_compute.run(spec)

    # a folder loaded again: Python does not import its module twice, its registrations replay
    calls = len(module_a.CALLS)
    again = param_compute.run(simple_op("test.only_a", tensor(4)), workloads_dirs=[dir_a])
    assert [r["status"] for r in again.records] == ["ok"]
    assert plugin_module(dir_a) is module_a and len(module_a.CALLS) > calls
    _assert_unchanged(_caller_state())


def test_both_folders_in_one_run_is_a_duplicate(tmp_path):
    dir_a = plugin_dir(tmp_path / "a", 2)
    dir_b = plugin_dir(tmp_path / "b", 3)
    toolchain = param_compute.runtime.toolchain.Toolchain.start([dir_a, dir_b])
    assert toolchain.workloads_dirs == (dir_a.resolve(), dir_b.resolve())
    [(source, why)] = toolchain.registries.failed_workloads.items()
    assert source == str((dir_b / "plugin_ops.py").resolve())
    assert why == "ValueError: duplicate operator registration: 'test.scale' is already registered"


def test_a_scripts_own_registrations_reach_every_later_toolchain(monkeypatch, caller_threads):
    monkeypatch.setattr(registry, "_PROCESS_TABLES", registry.Registries())
    monkeypatch.setattr(registry, "_PROCESS_LOG", [])

    class Negate(param_compute.OperatorInterface):
        def forward(self, x):
            return -x

    param_compute.register_operator("test.negate", Negate)
    with pytest.raises(ValueError, match="duplicate operator registration"):
        param_compute.register_operator("test.negate", Negate)
    for _ in range(2):
        result = param_compute.run(simple_op("test.negate", tensor(4)))
        assert [r["status"] for r in result.records] == ["ok"]


def test_a_dry_run_touches_no_torch_state(caller_threads):
    torch.set_num_threads(2)
    before = _caller_state()
    result = param_compute.run(simple_op("torch.add", tensor(4), tensor(4)), dry_run=True,
                               num_threads=1)
    assert [r["status"] for r in result.records] == ["dry-run"]
    _assert_unchanged(before)
