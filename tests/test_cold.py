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


# --- issue 31: the cache size believed only within bounds, every copy counted by the guard ---

def _one_cache(root, size, kind="Unified", level="3"):
    index = root / "index0"
    index.mkdir(parents=True)
    (index / "level").write_text(f"{level}\n")
    (index / "type").write_text(f"{kind}\n")
    if isinstance(size, bytes):
        (index / "size").write_bytes(size)
    elif size is not None:
        (index / "size").write_text(size)
    return root


@pytest.mark.parametrize("size, why", [
    ("1073741824K\n", "a cache of 1073741824K is not believed (0 < size <= 1024 MiB)"),
    ("2G\n", "a cache of 2G is not believed (0 < size <= 1024 MiB)"),
    ("0K\n", "a cache of 0K is not believed (0 < size <= 1024 MiB)"),
    ("", "malformed cache size ''"),  # a zero-byte file
    ("12X\n", "malformed cache size '12X'"),
    ("99999999999999999999K\n", "malformed cache size '99999999999999999999K'"),
    (b"\xff\xfe32M", "not ASCII text"),
    ("32M" + " " * 5000, "over the 4096-byte limit"),
    (None, "missing"),
])
def test_an_absurd_or_malformed_cache_size_falls_back_naming_the_file(tmp_path, caplog, size,
                                                                      why):
    """A forged 1 TiB cache made 256 copies (2.2 GB) under --cold rotate and a 2 TiB flush
    buffer ("internal error") under --cold flush; a malformed size was skipped silently."""
    root = _one_cache(tmp_path / "cache", size)
    with caplog.at_level("WARNING", logger="param_compute"):
        found, source = cpu_cache_bytes(root)
    assert found == FALLBACK_CACHE_BYTES
    assert source.startswith(f"fallback ({root / 'index0' / 'size'}") and why in source
    assert [r.getMessage() for r in caplog.records] == [
        f"the CPU cache size can't be read ({source[len('fallback ('):-1]}): --cold assumes "
        "32 MiB"]


def test_a_fifo_or_a_malformed_level_is_never_waited_on_nor_believed(tmp_path, caplog):
    import os

    root = _one_cache(tmp_path / "fifo", None)
    os.mkfifo(root / "index0" / "size")  # an open() of it would wait for a writer for ever
    size, source = cpu_cache_bytes(root)
    assert size == FALLBACK_CACHE_BYTES and "is a FIFO, not a regular file" in source
    level = _one_cache(tmp_path / "level", "32M\n", level="three")
    size, source = cpu_cache_bytes(level)
    assert size == FALLBACK_CACHE_BYTES and "malformed cache level 'three'" in source
    instruction = _one_cache(tmp_path / "instr", "lots", kind="Instruction")
    assert cpu_cache_bytes(instruction)[1].startswith("fallback (the machine's cache sizes")


def test_the_default_root_is_read_when_called(tmp_path, monkeypatch):
    import param_compute.measure.cold as cold

    monkeypatch.setattr(cold, "CPU_CACHE_DIR", _one_cache(tmp_path / "cache", "8M\n"))
    assert cold.cpu_cache_bytes() == (8 << 20, f"L3 ({tmp_path / 'cache'})")


def test_cold_bytes_counts_every_copy_and_the_flush_buffer(tmp_path, monkeypatch):
    import param_compute.measure.cold as cold
    from param_compute.runtime.memory_guard import cold_bytes

    monkeypatch.setattr(cold, "CPU_CACHE_DIR", _one_cache(tmp_path / "cache", "32M\n"))
    assert cold_bytes(None, 4 << 20) == (0, "")
    rotate = ColdCache("rotate", "cpu")
    assert cold_bytes(rotate, 4 << 20) == (
        15 * (4 << 20), "with --cold rotate's 16 copies of its 4 MiB inputs (64 MiB)")
    assert cold_bytes(rotate, 100 << 20) == (0, "")  # one copy: nothing more made
    both = ColdCache("both", "cpu")
    assert cold_bytes(both, 4 << 20) == (
        15 * (4 << 20) + (64 << 20),
        "with --cold both's 16 copies of its 4 MiB inputs (64 MiB) and its 64 MiB flush "
        "buffer")
    assert both.flush.buffer is None  # counted, not yet made


def _neg_4mib(tmp_path):
    return write_spec(tmp_path, simple_op("torch.neg", tensor(1024, 1024)))


@pytest.mark.parametrize("method, words", [
    ("rotate", "with --cold rotate's 16 copies of its 4 MiB inputs (64 MiB)"),
    ("flush", "with --cold flush's 64 MiB flush buffer"),
])
def test_the_memory_guard_counts_every_copy_before_allocating(tmp_path, monkeypatch, method,
                                                              words):
    """Under a 20 MB guard --cold rotate made 9 copies (the guard counted one)."""
    import param_compute.measure.cold as cold

    monkeypatch.setattr(cold, "CPU_CACHE_DIR", _one_cache(tmp_path / "cache", "32M\n"))
    out = tmp_path / "r.json"
    done = run_cli("-c", _neg_4mib(tmp_path), "--output", out, "--cold", method, "-i", "2",
                   "--max-memory", "20MB")
    assert done.returncode == 1
    _, [run], finish = read_results(out)
    assert run["status"] == "error" and run["error"]["phase"] == "memory"
    needed = "64 MiB" if method == "rotate" else "68 MiB"
    assert run["error"]["message"] == (
        f"the config's tensors need an estimated {needed} {words}, over the 19.1 MiB limit "
        "(--max-memory); nothing was allocated")
    assert finish["runs_failed"] == 1
    roomy = run_cli("-c", _neg_4mib(tmp_path), "--output", tmp_path / "ok.json", "--cold",
                    method, "-i", "2", "--max-memory", "200MB")
    assert roomy.returncode == 0, roomy.stderr
    _, [run], _ = read_results(tmp_path / "ok.json")
    metric = run["metric"]["forward"]
    assert metric["cold.copies"] == [16 if method == "rotate" else 1]
    assert metric["cold.flush_bytes"] == [0 if method == "rotate" else 64 << 20]


@pytest.mark.parametrize("method", ["rotate", "flush"])
def test_a_forged_huge_cache_runs_on_the_fallback_with_a_warning(tmp_path, monkeypatch, method):
    """A forged 1 TiB cache: 256 copies (2.2 GB) for rotate, "internal error" for flush."""
    import param_compute.measure.cold as cold

    monkeypatch.setattr(cold, "CPU_CACHE_DIR", _one_cache(tmp_path / "cache", "1073741824K\n"))
    out = tmp_path / "r.json"
    done = run_cli("-c", _neg_4mib(tmp_path), "--output", out, "--cold", method, "-i", "2")
    assert done.returncode == 0, done.stderr
    assert (f"WARNING: the CPU cache size can't be read ({tmp_path / 'cache' / 'index0'}"
            f"/size: a cache of 1073741824K is not believed (0 < size <= 1024 MiB)): --cold "
            "assumes 32 MiB") in done.stderr
    assert "internal error" not in done.stderr
    _, [run], _ = read_results(out)
    metric = run["metric"]["forward"]
    assert metric["cold.cache_bytes"] == [32 << 20]
    assert metric["cold.copies"] == [16 if method == "rotate" else 1]


def test_a_flush_buffer_that_cannot_be_allocated_is_a_memory_error_saying_so(monkeypatch):
    import torch

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
                           "allocate memory\nmore")

    flush = CacheFlush(64 << 20)
    monkeypatch.setattr(torch, "zeros", refuse)
    with pytest.raises(MemoryError) as raised:
        flush.allocate()
    assert str(raised.value) == (
        "--cold: the 64 MiB flush buffer can't be allocated: [enforce fail at alloc_cpu.cpp:127]"
        " DefaultCPUAllocator: can't allocate memory")
    assert flush.buffer is None
