"""Distributed steps with real ranks (gloo, one thread each): a job replayed under torchrun's
variables, collectives measured alone with their bandwidths, a rank killed mid-replay, the
job's files read together, two "nodes" on one machine, and a live capture under torchrun.

Ranks are forked from the tests' zygote with the variables torchrun gives (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT); the two-node test runs torchrun itself. Every test
skips where torch.distributed or gloo is unavailable.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch

from conftest import ZYGOTE, read_results, run_cli, write_spec

pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with gloo is not available")

GENERATORS = {"build_data_generator": "PyTorch:DefaultDataGenerator",
              "input_data_generator": "PyTorch:DefaultDataGenerator"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ranks(argv, cwd: Path, world: int = 2, module="param_compute.cli.run_benchmark",
                extra_env=None):
    """``world`` ranks of ``python -m module argv``, as torchrun would start them."""
    port = free_port()
    ranks = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world),
               "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", **(extra_env or {})}
        args = [str(a) for a in argv]
        if module == "param_compute.cli.run_benchmark":
            args.append("--no-progress")
        ranks.append(ZYGOTE.start(args, module=module, cwd=cwd, env=env))
    return ranks


def finish(ranks, timeout=240):
    return [(rank.wait(timeout), *rank.communicate(1)) for rank in ranks]


def _tensor(*shape):
    return {"type": "tensor", "dtype": "float", "shape": list(shape), "requires_grad": False}


def _schema(op) -> str:
    return str(op._schema)


def job_files(tmp_path: Path, size: int = 4096):
    """A hand-made job of 2 ranks: an mm, an async all-reduce of its output (waited where an
    add_ reads it), and the add_; with the originals a capture writes."""
    ranks = {"0": {"count": 1}, "1": {"count": 1}}
    side = int(size ** 0.5)
    square = [_tensor(side, side), _tensor(side, side)]

    def aten(op, cpu_us):
        return {**GENERATORS, "config": [{"build": [{"args": [{"type": "str",
                                                              "value": _schema(op)}]}],
                                          "input": [{"args": square, "count": 2,
                                                     "ranks": ranks,
                                                     "original_us": {"cpu": cpu_us}}]}]}
    times = {"cpu": 20.0, "device": None, "comm": 300.0}
    spec = {
        "aten::mm": aten(torch.ops.aten.mm.default, 40.0),
        "c10d::allreduce_": {**GENERATORS, "config": [{"input": [{
            "args": [_tensor(side, side)],
            "kwargs": {"group": {"type": "str", "value": "0"},
                       "async_op": {"type": "bool", "value": True}},
            "count": 2, "original_us": times,
            "ranks": {r: {"count": 1, "original_us": times} for r in "01"}}]}]},
        "aten::add_": aten(torch.ops.aten.add_.Tensor, 10.0),
        "__process_groups__": {"world_size": 2, "groups": {
            "0": {"ranks": [0, 1], "backend": "gloo", "desc": "default_pg"}}},
    }
    calls = [{"run": "aten::mm|0|0|0", "ext": [[[0], 0], [[1], 1]], "original_us": 40.0},
             {"run": "c10d::allreduce_|0|0|0", "in": [[[0], 0, [0]]], "original_us": 20.0,
              "comm_us": 300.0},
             {"run": "aten::add_|0|0|0", "in": [[[0], 1, [0, 0]]], "ext": [[[1], 1]],
              "waits": [1], "original_us": 10.0}]
    step = {"format": "param_compute.step", "version": 2, "spec": "job.json", "world_size": 2,
            "ranks": [{"rank": r, "externals": 2, "calls": calls, "real_step_us": 500.0,
                       "original": {"total_us": {"cpu": 70.0, "device": 0.0},
                                    "captured_us": {"cpu": 70.0, "device": 0.0},
                                    "not_captured": [],
                                    "communication": {"calls": 1, "comm_us": 300.0,
                                                      "exposed_us": 250.0}}}
                      for r in (0, 1)]}
    path = write_spec(tmp_path, spec, "job.json")
    (tmp_path / "job.step.json").write_text(json.dumps(step))
    return path


def test_a_job_replays_on_two_ranks_and_its_files_are_read_together(tmp_path):
    path = job_files(tmp_path)
    out = tmp_path / "res.json"
    results = finish(start_ranks(["-c", path, "--replay-step", "-w", "2", "-i", "8",
                                  "--output", out], tmp_path))
    for status, stdout, stderr in results:
        assert status == 0, stderr[-3000:]
    files = [tmp_path / f"res.rank{r}of2.json" for r in (0, 1)]
    steps = []
    for rank, path in enumerate(files):
        header, records, finish_line = read_results(path)
        assert header["job"]["rank"] == rank and header["job"]["world_size"] == 2
        assert header["job"]["backend"] == "gloo"
        kinds = [r["op_name"] for r in records]
        # collectives first (measured alone, together), then the step, then compute
        assert kinds == ["c10d::allreduce_", "step_replay", "aten::mm", "aten::add_"]
        alone = records[0]
        assert alone["comms"]["ranks"] == 2 and alone["comms"]["bytes"] == 4096 * 4
        assert alone["comms"]["busbw_gbps"] == pytest.approx(alone["comms"]["algbw_gbps"])
        step = records[1]
        assert step["status"] == "ok" and step["step"]["rank"] == rank
        assert step["step"]["failed_calls"] == 0 and step["step"]["dataflow_mismatches"] == 0
        assert step["step"]["communication"]["calls"] == 1
        assert step["step"]["collectives"]["c10d::allreduce_|0|0|0"]["comm_us"] > 0
        assert all(r["count"] == 1 for r in records if r["op_name"] != "step_replay")
        steps.append(step["stats"]["step"]["median"])
    # the ranks agreed on when to stop: the same number of samples everywhere
    ns = {read_results(p)[1][0]["stats"]["forward"]["n"] for p in files}
    assert len(ns) == 1
    # rank 0 prints the collectives' table; rank 1 is quiet
    assert "algbw GB/s" in results[0][1] and "busbw GB/s" in results[0][1]
    assert "algbw" not in results[1][1]
    totals = run_cli("--json", *files, module="param_compute.workload_totals")
    assert totals.returncode == 0, totals.stderr
    job = json.loads(totals.stdout)
    assert job["world_size"] == 2 and job["per_rank_in_step_ms"] == steps
    assert job["in_step_ms"] == pytest.approx(sorted(steps)[0] + (sorted(steps)[1] -
                                                                   sorted(steps)[0]) / 2)
    for ledger in job["ranks"]:
        assert set(ledger["compute"]) == {"original_ms", "in_step_ms", "isolated_ms"}
        comm = ledger["communication"]
        assert comm["original_ms"] == pytest.approx(0.3)
        assert comm["original_exposed_ms"] == pytest.approx(0.25)
        assert comm["in_step_ms"] > 0 and comm["in_step_exposed_ms"] is not None
        row = next(r for r in ledger["ops"] if r["op"] == "c10d::allreduce_")
        assert row["collective"] and row["original_ms"] == pytest.approx(0.3)
    text = run_cli(*files, module="param_compute.workload_totals").stdout
    assert "job of 2 ranks" in text and "exposed orig" in text
    # one rank's file alone: its own ledger, and a warning that the job needs them all
    alone = run_cli(files[1], module="param_compute.workload_totals")
    assert alone.returncode == 0 and "rank 1 of a job of 2" in alone.stderr
    wrong = run_cli(files[0], files[0], module="param_compute.workload_totals")
    assert wrong.returncode == 2 and "rank 0 given twice" in wrong.stderr
    # the report and the history take them together too
    report = run_cli(*files, "-o", tmp_path / "job.html", module="param_compute.report")
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "job.html").read_text()
    assert "A job of 2 ranks" in html and "busbw GB/s" in html
    history = run_cli("add", "--db", tmp_path / "h.db", "--label", "a", *files,
                      module="param_compute.cli.history")
    assert history.returncode == 0, history.stderr
    assert "the job's in-step replay" in history.stdout and "median over its 2 ranks" \
        in history.stdout


def test_an_allreduce_sweep_gives_time_algbw_and_busbw_per_size(tmp_path):
    spec = {"torch.distributed.all_reduce": {
        **GENERATORS, "input_iterator": "RangeConfigIterator",
        "config": [{"input": [{"args": [{"type": "tensor", "dtype": "float",
                                         "requires_grad": False,
                                         "shape": [[256], [4096], [65536]],
                                         "__list__": ["shape"]}]}]}]}}
    path = write_spec(tmp_path, spec, "sweep.json")
    results = finish(start_ranks(["-c", path, "-w", "1", "-i", "5", "--output",
                                  tmp_path / "sweep_res.json"], tmp_path))
    assert all(status == 0 for status, _, _ in results), results[0][2][-2000:]
    stdout = results[0][1]
    table = stdout[stdout.index("collectives ("):]
    header = table.splitlines()[1]
    for column in ("collective", "bytes", "time ms", "algbw GB/s", "busbw GB/s"):
        assert column in header
    rows = [line for line in table.splitlines() if line.startswith("torch.distributed")]
    assert [row.split()[5:7] for row in rows] == [["1", "KiB"], ["16", "KiB"], ["256", "KiB"]]
    for rank in (0, 1):
        _, records, _ = read_results(tmp_path / f"sweep_res.rank{rank}of2.json")
        assert [r["comms"]["bytes"] for r in records] == [1024, 16384, 262144]
        for record in records:
            median = record["stats"]["forward"]["median"]
            assert record["comms"]["algbw_gbps"] == pytest.approx(
                record["comms"]["bytes"] / (median / 1e3) / 1e9)
    # every sample was the slowest rank's: both files hold the same samples
    one, two = (read_results(tmp_path / f"sweep_res.rank{r}of2.json")[1] for r in (0, 1))
    assert [r["metric"]["forward"]["measure.time"] for r in one] == \
        [r["metric"]["forward"]["measure.time"] for r in two]


def ranks_in_step_replay(tmp_path: Path, dist_timeout: int):
    """Two ranks of a job whose step replay takes seconds, once rank 0 is well inside it (the
    all-reduce measured alone first, quickly)."""
    path = job_files(tmp_path, size=1024 * 1024)  # a 1024² mm: tens of ms a step
    ranks = start_ranks(["-c", path, "--replay-step", "-w", "1", "-i", "200",
                         "--only", "c10d*", "--dist-timeout", str(dist_timeout), "--output",
                         tmp_path / "res.json"], tmp_path)
    marker = tmp_path / "res.rank0of2.json.running"  # the run rank 0 is executing
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if marker.exists() and "step_replay" in marker.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail("rank 0 never started the step replay")
    time.sleep(1.5)
    return ranks


def test_a_rank_killed_mid_replay_ends_the_other_in_time_with_one_message(tmp_path):
    ranks = ranks_in_step_replay(tmp_path, 30)
    ranks[1].kill()
    killed = time.monotonic()
    status = ranks[0].wait(60)
    took = time.monotonic() - killed
    stdout, stderr = ranks[0].communicate(1)
    print(f"rank 0 ended {took:.2f} s after rank 1 was killed (exit status {status})")
    assert status == 1
    assert took < 30, f"rank 0 took {took:.1f} s to end"
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, stderr
    # rank 0 is in the step's all-reduce (most of the time) or in the barrier that starts each
    # timed step when rank 1 dies: the message names which
    assert ("ERROR: rank 0: the step replay's calls[1] c10d::allreduce_" in errors[0]
            or errors[0].startswith(
                "ERROR: rank 0: the step replay, between its calls (the ranks' barrier before a "
                "step, or their agreement on a sample) failed")), errors[0]
    assert "rank 1 is gone" in errors[0] and "every record measured is kept" in errors[0]
    assert "Traceback" not in stderr and "WARNING: step_replay" not in stderr
    header, records, finish_line = read_results(tmp_path / "res.rank0of2.json")
    assert [r["op_name"] for r in records] == ["c10d::allreduce_", "step_replay"]
    assert records[0]["status"] == "ok"  # measured before: kept
    assert records[1]["status"] == "error" and records[1]["error"]["phase"] == "step"
    assert finish_line["kind"] == "finish" and "rank 0" in finish_line["aborted"]


def test_a_collective_that_never_completes_ends_the_job_within_its_timeout(tmp_path):
    """A rank that stops (SIGSTOP: alive, never in its next collective): the other ends
    within --dist-timeout, one message naming the call, every measured record kept."""
    import signal

    ranks = ranks_in_step_replay(tmp_path, 6)
    ranks[1].send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        status = ranks[0].wait(90)
        took = time.monotonic() - stopped
        stdout, stderr = ranks[0].communicate(1)
    finally:
        ranks[1].kill()
    print(f"rank 0 ended {took:.2f} s after rank 1 stopped (--dist-timeout 6; exit status "
          f"{status})")
    assert status == 1, stderr[-2000:]
    assert took < 6 + 30, f"rank 0 took {took:.1f} s to end"
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, stderr
    # where rank 1 stopped decides what rank 0 was waiting in: a call, or the barrier that
    # starts each timed step
    assert errors[0].startswith("ERROR: rank 0: the step replay's calls[") or errors[0].startswith(
        "ERROR: rank 0: the step replay, between its calls (the ranks' barrier before a step, "
        "or their agreement on a sample) did not complete within --dist-timeout 6 s (rank 1 is "
        "gone or hung)"), errors[0]
    assert "Traceback" not in stderr
    _, records, finish_line = read_results(tmp_path / "res.rank0of2.json")
    assert [r["op_name"] for r in records] == ["c10d::allreduce_", "step_replay"]
    assert records[0]["status"] == "ok" and records[1]["status"] == "error"
    assert finish_line["kind"] == "finish" and "rank 0" in finish_line["aborted"]


def test_two_nodes_on_one_machine_through_torchruns_rendezvous(tmp_path):
    spec = {"torch.distributed.all_reduce": {**GENERATORS, "config": [{"input": [
        {"args": [_tensor(1024)]}]}]}}
    path = write_spec(tmp_path, spec, "two.json")
    port = free_port()
    nodes = []
    for node in (0, 1):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        nodes.append(ZYGOTE.start(
            ["--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1",
             "--master_addr", "127.0.0.1", "--master_port", str(port), "-m",
             "param_compute.cli.run_benchmark", "-c", str(path), "-w", "1", "-i", "3",
             "--output", str(tmp_path / f"node{node}.json"), "--no-progress"],
            module="torch.distributed.run", cwd=tmp_path, env=env))
    for node in nodes:
        status = node.wait(300)
        assert status == 0, node.stderr_text()[-3000:]
    # each node's rank wrote its own file, named by its global rank
    header0, records0, _ = read_results(tmp_path / "node0.rank0of2.json")
    header1, records1, _ = read_results(tmp_path / "node1.rank1of2.json")
    assert header0["job"]["rank"] == 0 and header1["job"]["rank"] == 1
    assert records0[0]["comms"]["ranks"] == 2 and records0[0]["status"] == "ok"
    assert records0[0]["metric"]["forward"]["measure.time"] == \
        records1[0]["metric"]["forward"]["measure.time"]


STEP_MODULE = '''
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 8))
x = torch.randn(4, 16)
def step():
    model.zero_grad()
    model(x).sum().backward()
'''


def test_a_live_capture_under_torchrun_joins_every_rank_into_one_job(tmp_path):
    (tmp_path / "ddpstep.py").write_text(STEP_MODULE)
    results = finish(start_ranks(["--live", "ddpstep:step", "-o", tmp_path / "live.json",
                                  "--target-device", "cpu"], tmp_path,
                                 module="param_compute.cli.capture"))
    for status, stdout, stderr in results:
        assert status == 0, stderr[-3000:]
    assert "a job of 2 rank(s)" in results[0][1]
    assert "handed to rank 0" in results[1][1]
    spec = json.loads((tmp_path / "live.json").read_text())
    assert spec["__process_groups__"]["world_size"] == 2
    allreduce = spec["c10d::allreduce_"]["config"][0]["input"][0]
    assert set(allreduce["ranks"]) == {"0", "1"}
    step = json.loads((tmp_path / "live.step.json").read_text())
    assert step["version"] == 2 and len(step["ranks"]) == 2
    calls = step["ranks"][1]["calls"]
    collective = next(i for i, c in enumerate(calls) if c["run"].startswith("c10d::"))
    assert any(collective in c.get("waits", []) for c in calls[collective + 1:]) or \
        all(collective not in c.get("waits", []) for c in calls)  # waited, or at the end
