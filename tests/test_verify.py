"""``--verify``: what was timed (compiled) against eager, or against float64; the verdicts."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

import param_compute
from conftest import read_results, run_cli, simple_op, tensor, write_spec
from param_compute.runtime.verify import compare, verify

WRONG = textwrap.dedent("""
    import torch
    from param_compute import OperatorInterface, register_operator

    class WrongWhenCompiled(OperatorInterface):
        \"\"\"Deliberately wrong: the compiled graph adds one, eager does not.\"\"\"

        def forward(self, x):
            if torch.compiler.is_compiling():
                return x + 1
            return x * 1

    register_operator("test.wrong_when_compiled", WrongWhenCompiled)
""")


def test_compiled_add_mm_relu_pass_and_a_wrong_op_fails_with_exit_1(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "wrong.py").write_text(WRONG)
    good = write_spec(tmp_path, {**simple_op("torch.add", tensor(16, 16), tensor(16, 16)),
                                 **simple_op("torch.mm", tensor(16, 16), tensor(16, 16)),
                                 **simple_op("torch.relu", tensor(16, 16))}, "good.json")
    done = run_cli("-c", good, "--pt2-model", "--verify", "-w", "1", "-i", "2", "--output",
                   tmp_path / "good_r.json")
    assert done.returncode == 0, done.stderr
    records = read_results(tmp_path / "good_r.json")[1]
    assert [r["op_name"] for r in records] == ["torch.add", "torch.mm", "torch.relu"]
    for record in records:
        verdict = record["verify"]
        assert verdict["status"] == "PASS", record["op_name"]
        assert verdict["mean_rel_error"] < 1e-4 and verdict["max_abs_error"] < 1e-3
    bad = write_spec(tmp_path, simple_op("test.wrong_when_compiled", tensor(8)), "bad.json")
    failed = run_cli("-c", bad, "--workloads-dir", tmp_path / "plugins", "--pt2-model",
                     "--verify", "-i", "2", "--output", tmp_path / "bad_r.json")
    assert failed.returncode == 1
    [record] = read_results(tmp_path / "bad_r.json")[1]
    assert record["status"] == "ok" and record["verify"]["status"] == "FAIL"
    assert record["verify"]["max_abs_error"] == pytest.approx(1.0)
    assert "failed --verify" in failed.stderr


def test_fp64_reference_and_gradients():
    spec = simple_op("torch.mm", tensor(32, 32, dtype="bfloat16"), tensor(32, 32,
                                                                           dtype="bfloat16"))
    [record] = param_compute.run(spec, iteration=2, backward=True, verify="fp64").records
    verdict = record["verify"]
    assert verdict["status"] == "PASS" and verdict["gradients"] == 2
    assert 1e-5 < verdict["mean_rel_error"] < 2e-2  # bfloat16 rounding, seen against float64
    [plain] = param_compute.run(spec, iteration=2, verify="eager").records
    assert plain["verify"]["status"] == "PASS" and plain["verify"]["mean_rel_error"] == 0.0


def test_in_place_operator_is_compared_on_the_same_input_values():
    x = torch.ones(4)
    calls = []

    def timed():
        calls.append(1)
        return x.add_(1)

    verdict = verify(timed, lambda a, k: (lambda: a[0].add_(1)), [x], {}, "eager", False)
    assert verdict["status"] == "PASS" and len(calls) == 1


def test_compare_rules():
    a = torch.tensor([1.0, 2.0, float("nan")])
    assert compare([a], [a.clone()])["status"] == "PASS"  # NaN where the reference has NaN
    assert compare([a], [torch.tensor([1.0, 2.0, 3.0])])["status"] == "FAIL"
    assert compare([torch.ones(2)], [torch.ones(3)])["reason"].startswith("shape [2]")
    assert compare([torch.tensor([1, 2])], [torch.tensor([1, 3])])["status"] == "FAIL"
    half = torch.tensor([1.0, 2.0], dtype=torch.float16)
    near = compare([half], [torch.tensor([1.001, 2.0], dtype=torch.float64)])
    assert near["status"] == "PASS" and near["mean_rel_error"] == pytest.approx(0.001 / 3.001)
    far = compare([torch.tensor([1.001, 2.0])], [torch.tensor([1.0, 2.0])])
    assert far["status"] == "FAIL"  # float32 allows 1e-4 mean relative error, not 3e-4


def test_verify_option_is_checked(tmp_path):
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(4), tensor(4)))
    done = run_cli("-c", spec, "--verify=fp32", "--output", tmp_path / "r.json")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_dropout_verifies_in_plain_eager_mode_and_a_real_mismatch_still_fails(tmp_path):
    """Both calls draw the same random numbers: dropout's mask is the same (no false FAIL)."""
    spec = write_spec(tmp_path, simple_op("torch.nn.functional.dropout", tensor(64, 64),
                                          kwargs={"p": {"type": "float", "value": 0.5}}))
    done = run_cli("-c", spec, "--verify", "-i", "3", "--output", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    [record] = read_results(tmp_path / "r.json")[1]
    assert record["verify"] == {"status": "PASS", "mean_rel_error": 0.0, "max_abs_error": 0.0}
    [wide] = param_compute.run(json.loads(spec.read_text()), iteration=2, verify="fp64").records
    assert wide["verify"]["status"] == "PASS"  # the float64 copy draws the same mask
    # Rewinding the generator does not hide a real difference: a call that draws other numbers
    # (here twice as many, so the second draw differs) still fails.
    x = torch.ones(1000)
    verdict = verify(lambda: torch.rand(1000) + x,
                     lambda a, k: (lambda: torch.rand(1000) * 0 + torch.rand(1000) + a[0]),
                     [x], {}, "eager", False)
    assert verdict["status"] == "FAIL" and verdict["max_abs_error"] > 0.1


class _FakeCuda:
    """``torch.cuda`` as ``rng_rewind`` sees it, on a machine with one initialized device."""

    def __init__(self):
        self.state = [torch.tensor([1], dtype=torch.uint8)]

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def get_rng_state_all(self):
        return [s.clone() for s in self.state]

    def set_rng_state_all(self, states):
        self.state = [s.clone() for s in states]


def test_rng_rewind_puts_back_the_cpu_and_cuda_generators():
    from param_compute.runtime.verify import rng_rewind

    cuda = _FakeCuda()
    rewind = rng_rewind(cuda)
    first = torch.rand(3)
    cuda.state = [torch.tensor([7], dtype=torch.uint8)]  # the timed call advanced the device
    rewind()
    assert torch.equal(torch.rand(3), first) and cuda.state[0].item() == 1
