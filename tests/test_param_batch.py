"""``run_batch`` reads PARAM's batch files, with PARAM's command-line spelling."""

from __future__ import annotations

import json
from multiprocessing import shared_memory

import pytest
import torch

from conftest import REPO, tensor
from param_compute.profiling.batch_child import main as run_batch

BATCH_EXAMPLE = REPO.parent / "shared" / "param-compat" / "batch_example.json"


def _param_batch(**run_options):
    """A batch as PARAM's run_benchmark writes it for its ncu/nsys children."""
    return {"op_name": "torch.mm", "config_build_id": "3|0", "op_info": {
        "build_iterator": None, "input_iterator": None, "build_data_generator": None,
        "input_data_generator": "PyTorch:DefaultDataGenerator",
        "config": [{"build": None, "input": [
            {"id": "0_1", "args": [tensor(8, 4), tensor(4, 8)]},
            {"args": [tensor(8, 4), tensor(5, 8)]}]}]},  # no id: its position; fails to run
        "run_options": {"device": "cpu", "pass_type": "backward", "warmup": 1, "iteration": 2,
                        "op_exec_mode": "continuous", "cuda_l2_cache": False, **run_options}}


@pytest.fixture
def batch_example():
    if not BATCH_EXAMPLE.is_file():
        pytest.skip("../shared/param-compat is not beside this checkout")
    return BATCH_EXAMPLE


def test_param_s_batch_example_runs(batch_example, capsys):
    # PARAM's shipped example is stale (build_id "1:2", no op_exec_mode) and names cuda.
    assert run_batch(["-f", str(batch_example), "-d", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("torch.add|1|2|2_34: ok: forward median ")
    assert out[-1] == "batch done: 1 measured, 0 failed"


def test_param_s_batch_example_on_its_own_device(batch_example, capsys):
    status = run_batch(["--file", str(batch_example)])
    if torch.cuda.is_available():
        assert status == 0
    else:
        assert status == 2
        assert "--device cuda: CUDA is not available" in capsys.readouterr().err


def test_a_param_batch_file_with_several_inputs(tmp_path, capsys):
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(_param_batch()))
    assert run_batch(["-f", str(path)]) == 1  # the second input fails
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("torch.mm|3|0|0_1: ok: forward median ")
    assert "backward median" in out[0]
    assert out[1].startswith("torch.mm|3|0|1: error (forward): RuntimeError")
    assert out[2] == "batch done: 1 measured, 1 failed"


def test_a_param_batch_in_shared_memory(capsys):
    data = json.dumps(_param_batch(pass_type="ExecutionPass.FORWARD")).encode()
    block = shared_memory.SharedMemory(create=True, size=len(data))
    try:
        block.buf[:len(data)] = data
        assert run_batch(["-s", block.name, "-v"]) == 1
    finally:
        block.close()
        block.unlink()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("torch.mm|3|0|0_1: ok: forward median ")
    assert "backward" not in out[0]


def test_unusable_batches_exit_2_with_a_message(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"op_name": "torch.mm"}))
    assert run_batch(["-f", str(bad)]) == 2
    assert "nor PARAM's" in capsys.readouterr().err
    batch = _param_batch()
    batch["config_build_id"] = "x"
    bad.write_text(json.dumps(batch))
    assert run_batch(["-f", str(bad)]) == 2
    assert "config_build_id 'x' is not CONFIG|BUILD" in capsys.readouterr().err
    assert run_batch(["-s", "param_compute_no_such_block"]) == 2
    assert "shared memory 'param_compute_no_such_block'" in capsys.readouterr().err


def test_a_param_batch_file_gets_run_benchmarks_memory_guard(tmp_path, capsys):
    """PARAM's run_options have no memory limit: the default guard (half the memory available)
    applies, as in run_benchmark, so a 4 TiB tensor is refused, not allocated."""
    batch = _param_batch(pass_type="ExecutionPass.FORWARD")
    batch["op_info"]["config"][0]["input"] = [
        {"id": "huge", "args": [tensor(2 ** 20, 2 ** 20), tensor(2 ** 20, 8)]},
        {"id": "small", "args": [tensor(8, 4), tensor(4, 8)]}]
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(batch))
    assert run_batch(["-f", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("torch.mm|3|0|huge: error (memory): MemoryLimitExceeded: the "
                             "config's tensors need an estimated 4 TiB")
    assert out[1].startswith("torch.mm|3|0|small: ok: forward median ")
