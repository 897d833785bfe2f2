"""``--cold``: the cache size read from the machine, copies that exceed it, the flush hook, and
what each record says was done."""

from __future__ import annotations

import pytest

from conftest import read_results, run_cli, simple_op, tensor, write_spec
from param_compute.errors import EXIT_INVALID
from param_compute.results.records import PassResult
from param_compute.measure.cold import (FALLBACK_CACHE_BYTES, CacheFlush, ColdCache, Rotation,
                                        copies_needed, cpu_cache_bytes)


def _cache_dir(root, entries):
    for i, (level, kind, size) in enumerate(entries):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


def test_the_last_level_cache_is_the_highest_data_or_unified_level(tmp_path):
    root = _cache_dir(tmp_path / "cache", [(1, "Data", "48K"), (1, "Instruction", "32K"),
                                           (2, "Unified", "1024K"), (3, "Unified", "32M")])
    size, source = cpu_cache_bytes(root)
    assert size == 32 << 20 and source.startswith("L3")
    only_l2 = _cache_dir(tmp_path / "l2", [(1, "Data", "32K"), (2, "Unified", "2048K"),
                                          (4, "Instruction", "1G")])
    assert cpu_cache_bytes(only_l2)[0] == 2048 << 10


@pytest.mark.parametrize("entries", [[], [(3, "Unified", "lots")], [(2, "Instruction", "8M")]])
def test_an_unreadable_cache_falls_back_and_says_so(tmp_path, entries):
    root = _cache_dir(tmp_path / "cache", entries)
    size, source = cpu_cache_bytes(root)
    assert size == FALLBACK_CACHE_BYTES and source.startswith("fallback")
    assert cpu_cache_bytes(tmp_path / "missing")[0] == FALLBACK_CACHE_BYTES


def test_copies_together_exceed_twice_the_cache():
    assert copies_needed(1 << 20, 32 << 20) == 64
    assert copies_needed(3 << 20, 32 << 20) == 22  # 22 x 3 MiB = 66 MiB >= 64 MiB
    assert copies_needed(100 << 20, 32 << 20) == 1  # already larger than the cache
    assert copies_needed(16, 32 << 20) == 256  # capped
    assert copies_needed(0, 32 << 20) == 1


def test_rotation_calls_each_copy_in_turn():
    calls = []
    rotation = Rotation([lambda i=i: calls.append(i) for i in range(3)])
    for _ in range(7):
        rotation()
    assert calls == [0, 1, 2, 0, 1, 2, 0]


def test_cold_cache_binds_fresh_copies_until_the_cache_is_exceeded():
    cold = ColdCache("rotate", "cpu")
    bound = []

    def more():
        bound.append(1)
        return lambda: len(bound)

    fn = cold.forward(lambda: 0, cold.cache // 2, more)
    assert len(bound) == 3 and isinstance(fn, Rotation) and len(fn.fns) == 4
    forward, backward = PassResult("forward", [], []), PassResult("backward", [], [])
    cold.note([forward, backward], fn)
    assert forward.extra == {"cold.copies": [4], "cold.flush_bytes": [0],
                             "cold.cache_bytes": [cold.cache]}
    assert backward.extra["cold.copies"] == [1]  # the backward pass runs on one copy
    assert cold.forward(len, 4 * cold.cache, more) is len


def test_flush_writes_a_buffer_twice_the_cache():
    cold = ColdCache("flush", "cpu")
    assert cold.flush.nbytes == 2 * cold.cache == cold.flush_bytes()
    assert cold.flush.buffer is None  # made once the memory guard has counted it
    cold.forward(len, 64, lambda: len)
    before = int(cold.flush.buffer[0])
    cold.flush()
    assert int(cold.flush.buffer[-1]) == before + 1
    assert ColdCache("rotate", "cpu").flush is None
    small = CacheFlush(10)
    small.allocate()
    assert small.buffer.numel() == 2


@pytest.mark.parametrize("method, rotated, flushed", [
    ("rotate", True, False), ("flush", False, True), ("both", True, True)])
def test_each_record_says_what_cold_did(tmp_path, method, rotated, flushed):
    spec = write_spec(tmp_path, simple_op("torch.add", tensor(64, 64), tensor(64, 64)))
    out = tmp_path / "r.json"
    args = ["-c", spec, "--output", out, "-w", "1", "-i", "3", "--cold"]
    result = run_cli(*(args + ([] if method == "rotate" else [method])))
    assert result.returncode == 0, result.stderr
    header, [run], _ = read_results(out)
    assert header["run_options"]["cold"] == method
    metric = run["metric"]["forward"]
    assert (metric["cold.copies"][0] > 1) == rotated  # 32 KiB of inputs: many copies
    assert (metric["cold.flush_bytes"][0] > 0) == flushed
    assert metric["cold.cache_bytes"][0] > 0
    assert len(metric["measure.time"]) == 3


def test_without_cold_records_have_no_cold_fields(tmp_path):
    spec = write_spec(tmp_path, simple_op("torch.neg", tensor(8)))
    out = tmp_path / "r.json"
    assert run_cli("-c", spec, "--output", out).returncode == 0
    _, [run], _ = read_results(out)
    assert not [key for key in run["metric"]["forward"] if key.startswith("cold.")]


@pytest.mark.parametrize("extra, message", [
    (["--cold", "flush", "--exec-mode", "continuous"], "use --exec-mode discrete"),
    (["--cold", "both", "--exec-mode", "continuous_events"], "use --exec-mode discrete"),
])
def test_cold_flush_outside_discrete_mode_is_refused(tmp_path, extra, message):
    spec = write_spec(tmp_path, simple_op("torch.neg", tensor(8)))
    result = run_cli("-c", spec, "--output", tmp_path / "r.json", *extra)
    assert result.returncode == EXIT_INVALID
    assert message in result.stderr
    assert not (tmp_path / "r.json").exists()


def test_rotation_works_in_continuous_mode(tmp_path):
    spec = write_spec(tmp_path, simple_op("torch.neg", tensor(256)))
    out = tmp_path / "r.json"
    result = run_cli("-c", spec, "--output", out, "--cold", "--exec-mode", "continuous",
                     "-i", "20")
    assert result.returncode == 0, result.stderr
    _, [run], _ = read_results(out)
    assert run["metric"]["forward"]["cold.copies"][0] == 256


def test_on_cuda_the_cache_is_the_l2_and_flush_is_the_clock_s_own(monkeypatch):
    import types

    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(L2_cache_size=50 << 20))
    cold = ColdCache("both", "cuda:0")
    assert cold.cache == 50 << 20 and cold.source == "the CUDA device's L2"
    assert cold.flush is None and cold.flush_bytes() == 50 << 20  # CudaEventClock flushes it
    device = types.SimpleNamespace(name="cuda:0", clock=types.SimpleNamespace(barrier="own"))
    assert ColdCache.attach("both", device).rotate and device.clock.barrier == "own"
    cpu = types.SimpleNamespace(name="cpu", clock=types.SimpleNamespace(barrier=None))
    attached = ColdCache.attach("flush", cpu)
    assert cpu.clock.barrier is attached.flush and not attached.rotate
    assert ColdCache.attach(None, cpu) is None


def test_cold_flush_with_a_warm_l2_and_rotation_with_graphs_are_refused():
    from param_compute.errors import OptionsError
    from param_compute.runtime.options import RunOptions

    with pytest.raises(OptionsError, match="drop --cuda-l2-cache on"):
        RunOptions(device="cuda", cold="flush", cuda_l2_cache=True).check()
    with pytest.raises(OptionsError, match="drop --cuda-graph/--pt2-model"):
        RunOptions(cold="rotate", pt2_model=True).check()
    with pytest.raises(OptionsError, match="--cold must be rotate, flush or both"):
        RunOptions(cold="lukewarm").check()
    assert RunOptions.from_json(RunOptions(cold="both").to_json()).cold == "both"
