"""Distributed steps, in one process: collectives named and validated, a job's plan per rank,
the step file's version 2, the ranks' clock, the CUDA seam, and jobs captured from traces.

What needs real ranks (a job replayed, a rank killed, two nodes) is in test_job_runs.py.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

import param_compute
from conftest import write_spec
from param_compute.capture.collectives import collective_call, replay_path
from param_compute.capture.job import JobCapture, JobError
from param_compute.capture.trace.comms import distributed_info, uncovered
from param_compute.cli.capture import main as capture_main
from param_compute.errors import OptionsError, SpecError
from param_compute.measure.devices import Device
from param_compute.measure.measurer import Measurer
from param_compute.measure.protocol import Protocol
from param_compute.measure.ranks import ranked
from param_compute.measure.timing import CounterClock
from param_compute.operators.collectives import KINDS, bandwidth, bus_factor, kind_of
from param_compute.plan.job import JobPlan, JobRank, is_job, resolve_rank
from param_compute.plan.runplan import plan_runs
from param_compute.plan.iterators import BUILTIN_ITERATORS
from param_compute.runtime.job import backend_for, backend_error, group_plan, rank_device
from param_compute.spec.job import for_rank
from param_compute.spec.step_file import StepFileError, rank_step, validate_step

ALLREDUCE = ("c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup "
             "process_group, __torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? "
             "sparse_indices, bool async_op=True, int timeout=-1) -> (Tensor[], "
             "__torch__.torch.classes.c10d.Work)")
ALLTOALL = ("c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d."
            "ProcessGroup process_group, int[] output_split_sizes, int[] input_split_sizes, "
            "bool async_op=True, int timeout=-1) -> __torch__.torch.classes.c10d.Work")
MUL = str(torch.ops.aten.mul.Tensor._schema)


# -- the collectives' table ---------------------------------------------------------------------

def test_collective_names_and_nccl_tests_bandwidths():
    assert kind_of("c10d::allreduce_").name == kind_of("torch.distributed.all_reduce").name \
        == "all_reduce"
    assert kind_of("c10d::_allgather_base_").name == "all_gather_into_tensor"
    assert kind_of("c10d::alltoall_base_").name == "all_to_all_single"
    assert kind_of("aten::mm") is None and kind_of("torch.distributed.load") is None
    # nccl-tests' bus factors for n ranks
    assert bus_factor(KINDS["all_reduce"], 4) == 1.5
    assert bus_factor(KINDS["all_gather_into_tensor"], 4) == 0.75
    assert bus_factor(KINDS["reduce_scatter_tensor"], 2) == 0.5
    assert bus_factor(KINDS["all_to_all_single"], 8) == 7 / 8
    assert bus_factor(KINDS["broadcast"], 8) == 1.0 and bus_factor(KINDS["barrier"], 2) is None
    rates = bandwidth(KINDS["all_reduce"], 2**20, 2, 1.0)  # 1 MiB in 1 ms on 2 ranks
    assert rates["algbw_gbps"] == pytest.approx(1.048576)
    assert rates["busbw_gbps"] == pytest.approx(1.048576)  # 2 (n-1)/n = 1 at n = 2


def test_collectives_resolve_to_the_table_and_other_c10d_names_are_refused():
    spec = {"torch.distributed.all_reduce": {"config": [{"input": [{"args": [
        {"type": "tensor", "dtype": "float", "shape": [256]}]}]}]},
        "c10d::allreduce_": {"config": [{"input": [{"args": [
            {"type": "tensor", "dtype": "float", "shape": [256]}]}]}]}}
    planned = param_compute.run(spec, dry_run=True).records
    assert [r["op_name"] for r in planned] == ["torch.distributed.all_reduce",
                                               "c10d::allreduce_"]
    with pytest.raises(SpecError) as caught:
        param_compute.run({"c10d::shuffle_": {"config": [{"input": [{"args": []}]}]}},
                          dry_run=True)
    assert "no collective param_compute replays" in str(caught.value)
    with pytest.raises(SpecError):  # torch.distributed's other functions stay unreachable
        param_compute.run({"torch.distributed.destroy_process_group": {
            "config": [{"input": [{"args": []}]}]}}, dry_run=True)


def test_fsdp_ops_resolve_without_allow_namespace():
    import torch.distributed.fsdp  # noqa: F401  registers fsdp::

    schema = str(torch.ops.fsdp.chunk_cat.default._schema)
    spec = {"fsdp::chunk_cat": {"config": [{"build": [{"args": [{"type": "str",
                                                                 "value": schema}]}],
                                            "input": [{"args": [
        {"type": "genericlist", "value": [_tensor(4)]},
        {"type": "int", "value": 0}, {"type": "int", "value": 2}],
        "kwargs": {"out": _tensor(2, 2)}}]}]}}
    result = param_compute.run(spec, warmup=0, iteration=2)
    assert [r["status"] for r in result.records] == ["ok"]


# -- job specs and their plan --------------------------------------------------------------------

def _tensor(*shape):
    return {"type": "tensor", "dtype": "float", "shape": list(shape), "requires_grad": False}


def job_spec(world: int = 2) -> dict:
    """A job of ``world`` ranks: an mm each ran, an uneven all-to-all, and a config only rank
    1 ran."""
    ranks = {str(r): {"count": 1} for r in range(world)}
    generators = {"build_data_generator": "PyTorch:DefaultDataGenerator",
                  "input_data_generator": "PyTorch:DefaultDataGenerator"}
    return {
        "aten::mm": {**generators, "config": [{"build": [{"args": [{"type": "str", "value": str(
            torch.ops.aten.mm.default._schema)}]}], "input": [
            {"args": [_tensor(8, 8), _tensor(8, 8)], "count": world, "ranks": ranks},
            {"args": [_tensor(4, 4), _tensor(4, 4)], "count": 1,
             "ranks": {str(world - 1): {"count": 1}}}]}]},
        "c10d::alltoall_base_": {**generators, "config": [{"input": [{
            "args": [_tensor(8), _tensor(8)],
            "kwargs": {"group": {"type": "str", "value": "0"},
                       "output_split_sizes": {"type": "genericlist", "value": [
                           {"type": "int", "value": 3}, {"type": "int", "value": 5}]}},
            "count": world,
            "ranks": {**ranks, str(world - 1): {"count": 1, "kwargs": {
                "group": {"type": "str", "value": "0"},
                "output_split_sizes": {"type": "genericlist", "value": [
                    {"type": "int", "value": 5}, {"type": "int", "value": 3}]}}}}}]}]},
        "__process_groups__": {"world_size": world, "groups": {
            "0": {"ranks": list(range(world)), "backend": "gloo", "desc": "default_pg"}}},
    }


def test_job_spec_validates_and_bad_groups_or_ranks_are_named(tmp_path):
    spec = job_spec()
    # outside torchrun a dry run plans rank 0's part of the job
    assert len(param_compute.run(spec, dry_run=True).records) == 2
    bad = copy.deepcopy(spec)
    bad["__process_groups__"]["groups"]["0"]["ranks"] = [0, 2]
    bad["aten::mm"]["config"][0]["input"][0]["ranks"]["7"] = {"count": 1}
    with pytest.raises(SpecError) as caught:
        param_compute.run(bad, dry_run=True)
    text = str(caught.value)
    assert "__process_groups__.groups.0.ranks: ranks is a list of distinct ranks from 0 to 1" \
        in text
    assert "aten::mm.config[0].input[0].ranks.7: '7' is no rank of the job" in text
    bad = copy.deepcopy(spec)
    bad["aten::mm"]["config"][0]["input"][1]["ranks"]["1"] = {"count": "1"}
    with pytest.raises(SpecError) as caught:
        param_compute.run(bad, dry_run=True)
    assert "aten::mm.config[0].input[1].ranks.1.count: expected integer" in str(caught.value)


def test_a_job_runs_each_rank_part_collectives_first_and_is_never_sharded():
    from param_compute.runtime.toolchain import Toolchain

    validated = Toolchain.start().validate(job_spec(), "job.json")
    assert is_job(validated)
    runs = list(plan_runs(validated, BUILTIN_ITERATORS))
    for rank, expected in ((0, ["c10d::alltoall_base_", "aten::mm"]),
                           (1, ["c10d::alltoall_base_", "aten::mm", "aten::mm"])):
        order = list(JobPlan(validated, JobRank(rank, 2)).order(runs))
        assert [run.op_name for run in order] == expected
        splits = order[0].input["kwargs"]["output_split_sizes"]["value"]
        assert [v["value"] for v in splits] == ([3, 5] if rank == 0 else [5, 3])
        assert order[0].input["count"] == 1 and "ranks" not in order[0].input
    assert for_rank({"args": [], "ranks": {"1": {"count": 2}}}, 0) is None
    assert for_rank({"args": []}, 3) == {"args": []}  # a hand-written config: every rank's


def test_a_world_size_other_than_the_jobs_is_refused_in_one_line(tmp_path):
    from param_compute.runtime.toolchain import Toolchain

    validated = Toolchain.start().validate(job_spec(), "job.json")
    with pytest.raises(OptionsError) as caught:
        resolve_rank(validated, "job.json", {"RANK": "0", "WORLD_SIZE": "4",
                                             "LOCAL_RANK": "0"})
    message = str(caught.value)
    assert "\n" not in message
    assert "job.json is a job of 2 rank(s) and this run has 4" in message
    assert "torchrun --nproc_per_node 2" in message
    with pytest.raises(OptionsError):  # no torchrun: a world of one
        resolve_rank(validated, "job.json", {})
    assert resolve_rank(validated, "job.json", {}, dry_run=True).source == "dry-run"
    # the run says it in one line, exit 2, before anything runs
    path = write_spec(tmp_path, job_spec())
    from conftest import run_cli

    result = run_cli("-c", path, "-o", tmp_path / "r.json")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "a job of 2 rank(s)" in result.stderr
    assert not (tmp_path / "r.json").exists()
    result = run_cli("-c", path, "--shard", "0/2", "-o", tmp_path / "r.json")
    assert result.returncode == 2 and "is not sharded" in result.stderr


# -- the step file's version 2 -------------------------------------------------------------------

def test_step_file_version_2_holds_a_step_per_rank_and_version_1_still_reads():
    one = {"format": "param_compute.step", "version": 1, "externals": 0,
           "calls": [{"run": "aten::mm|0|0|0"}]}
    two = {"format": "param_compute.step", "version": 2, "world_size": 2, "spec": "j.json",
           "ranks": [{"rank": 1, "externals": 0, "calls": [{"run": "aten::mm|0|0|0"}]},
                     {"rank": 0, "externals": 0, "calls": [
                         {"run": "c10d::allreduce_|0|0|0"},
                         {"run": "aten::mm|0|0|0", "waits": [0], "comm_us": 5.0}]}]}
    assert validate_step(one) == [] and validate_step(two) == []
    assert rank_step(one, 0)["world_size"] == 1
    assert [c["run"] for c in rank_step(two, 0)["calls"]] == ["c10d::allreduce_|0|0|0",
                                                               "aten::mm|0|0|0"]
    assert rank_step(two, 1)["rank"] == 1
    with pytest.raises(StepFileError):
        rank_step(one, 1)
    bad = copy.deepcopy(two)
    bad["ranks"][1]["calls"][1]["waits"] = [1]
    bad["ranks"][1]["rank"] = 1
    problems = {".".join(map(str, p.path)): p.message for p in validate_step(bad)}
    assert "earlier calls" in problems["ranks.1.calls.1.waits"]
    assert "each once" in problems["ranks.1.rank"]
    assert "one per rank" in validate_step({**two, "ranks": two["ranks"][:1]})[0].message


# -- the ranks' clock ----------------------------------------------------------------------------

def test_a_rank_clock_takes_a_barrier_per_sample_and_the_ranks_decide_alike():
    """Two ranks measured one after the other with stand-ins for torch.distributed: the agreed
    samples decide, so both take as many; with ``slowest`` the kept samples are the agreed."""
    barriers = []

    def reduce_max(values):  # the other rank: 3 ms every sample
        return [max(v, 3.0) for v in values]

    def counter():  # this rank: samples of 1 and 2 ms in turn (noisy alone: never sure)
        state["now"] += state["steps"][state["i"] % 2]
        state["i"] += 1
        return state["now"]

    protocol = Protocol(warmup=1, iteration=5, max_noise=2.0, max_time=0.05, min_samples=5)
    for slowest in (False, True):
        state = {"now": 0, "i": 0, "steps": (0, 0)}
        stamps = iter(range(10**6))

        def clock():  # start stamps 0 apart, end stamps 1 or 2 ms after
            n = next(stamps)
            state["now"] += 0 if n % 2 == 0 else (1_000_000 if n % 4 == 1 else 2_000_000)
            return state["now"]
        device = Device("cpu", CounterClock(clock))
        clock_device = ranked(device, slowest=slowest, barrier=lambda: barriers.append(1),
                              reduce_max=reduce_max)
        barriers.clear()
        result = Measurer(protocol, clock_device, num_threads=None).measure(lambda: None)
        assert len(barriers) == 1 + len(result.measure_ms)  # warm-up and every sample
        # the agreed samples (3 ms each) decided: sure at the fewest samples, on every rank
        assert len(result.measure_ms) == 5 and result.facts["stop_reason"] == "noise"
        assert set(result.measure_ms) == ({3.0} if slowest else {1.0, 2.0})


# -- the CUDA seam -------------------------------------------------------------------------------

def test_cuda_jobs_take_nccl_and_each_rank_its_own_gpu():
    assert backend_for("cuda:1") == "nccl" and backend_for("cpu") == "gloo"
    assert backend_for("cuda", "gloo") == "gloo"
    with pytest.raises(OptionsError):
        backend_for("cpu", "nccl")
    assert rank_device("cuda", JobRank(1, 2, local_rank=1)) == "cuda:1"
    assert rank_device("cuda:0", JobRank(1, 2, local_rank=1)) == "cuda:0"  # named: kept
    assert rank_device("cpu", JobRank(1, 2, local_rank=1)) == "cpu"
    groups = group_plan({"groups": {"0": {"ranks": [0, 1]}, "tp": {"ranks": [1]}}}, 2)
    assert groups == [("world", [0, 1], True), ("0", [0, 1], True), ("tp", [1], False)]
    text = backend_error(RuntimeError("[/x/gloo/pair.cc:537] Read error [1.2.3.4]:9: Connection "
                                      "reset by peer. This is typically caused by a hang"))
    assert text == "Read error [1.2.3.4]:9: Connection reset by peer."


# -- capture: traces of several ranks -------------------------------------------------------------

def _t(tensor_id: int, numel: int, storage: int = None):
    return [tensor_id, storage or tensor_id + 1000, 0, numel, 4, "cpu"]


def _node(node_id, name, schema, types, values, shapes, parent=1, rf=None):
    return {"id": node_id, "name": name, "ctrl_deps": parent,
            "inputs": {"values": values, "shapes": shapes, "types": types,
                       "strides": [[] for _ in values]},
            "outputs": {"values": [], "shapes": [], "types": [], "strides": []},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": rf or node_id},
                      {"name": "op_schema", "type": "string", "value": schema}]}


def rank_trace(rank: int, splits):
    """One rank's step: a mul, an async all-reduce of its output, a mul reading it (where the
    wait goes), an uneven all-to-all; gloo's spans after each collective."""
    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0,
              "attrs": []},
             _node(2, "aten::mul", MUL, ["Tensor(float)", "Tensor(float)"],
                   [_t(10, 64), _t(11, 64)], [[64], [64]]),
             _node(3, "c10d::allreduce_", ALLREDUCE,
                   ["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"],
                   [[_t(12, 64)], "<Object>", "<Object>", "<None>", True, -1],
                   [[[64]], [], [], [], [], []]),
             _node(4, "gloo:all_reduce", "", ["Tensor(float)"], [_t(12, 64)], [[64]]),
             _node(5, "aten::mul", MUL, ["Tensor(float)", "Tensor(float)"],
                   [_t(12, 64), _t(11, 64)], [[64], [64]]),
             _node(6, "c10d::alltoall_base_", ALLTOALL,
                   ["Tensor(float)", "Tensor(float)", "Object", "GenericList[Int,Int]",
                    "GenericList[Int,Int]", "Bool", "Int"],
                   [_t(20, 8), _t(21, 8), "<Object>", list(splits), list(splits[::-1]), False,
                    -1], [[8], [8], [], [[], []], [[], []], [], []]),
             _node(7, "gloo:all_to_all", "", ["Tensor(float)"], [_t(21, 8)], [[8]])]
    nodes[1]["outputs"] = {"values": [_t(12, 64)], "shapes": [[64]],
                           "types": ["Tensor(float)"], "strides": [[1]]}
    trace = {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": nodes}
    durations = {2: 10.0, 3: 20.0, 4: 400.0, 5: 10.0, 6: 30.0, 7: 200.0}
    starts = {2: 0.0, 3: 15.0, 4: 40.0, 5: 50.0, 6: 500.0, 7: 510.0}
    events = [{"ph": "X", "cat": "user_annotation" if n["name"].startswith("gloo")
               else "cpu_op", "name": n["name"], "pid": 1,
               "tid": 2 if n["name"].startswith("gloo") else 1, "ts": 1000 + starts[n["id"]],
               "dur": durations[n["id"]], "args": {"Record function id": n["id"]}}
              for n in nodes if n["id"] in durations]
    kineto = {"traceEvents": events, "distributedInfo": {
        "backend": "gloo", "rank": rank, "world_size": 2, "pg_count": 1,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo",
                       "pg_size": 2, "ranks": [0, 1]}]}}
    return trace, kineto


def _files(tmp_path, splits=((3, 5), (5, 3))):
    paths = []
    for rank in (1, 0):  # out of order: the rank comes from distributedInfo
        trace, kineto = rank_trace(rank, splits[rank])
        et, kin = tmp_path / f"et{rank}.json", tmp_path / f"kin{rank}.json"
        et.write_text(json.dumps(trace))
        kin.write_text(json.dumps(kineto))
        paths += ["--from-et", et, "--kineto", kin]
    return [str(p) for p in paths]


def test_every_ranks_trace_captured_into_one_job_with_paired_collectives(tmp_path, capsys):
    out = tmp_path / "job.json"
    assert capture_main(_files(tmp_path) + ["-o", str(out), "--target-device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "a job of 2 rank(s)" in printed
    assert printed.count("original time covered: cpu 100.0%") == 2
    # each from its call's issue to its backend span's end: 15 -> 440, 500 -> 710 µs
    assert "communication 0.635 ms in 2 collective call(s) (2 timed" in printed
    spec = json.loads(out.read_text())
    assert spec["__process_groups__"] == {"world_size": 2, "groups": {"0": {
        "ranks": [0, 1], "backend": "cpu:gloo", "desc": "default_pg"}}}
    allreduce = spec["c10d::allreduce_"]["config"][0]["input"][0]
    assert allreduce["kwargs"]["async_op"]["value"] is True and allreduce["count"] == 2
    assert allreduce["ranks"]["0"]["original_us"]["comm"] == 425.0
    alltoall = spec["c10d::alltoall_base_"]["config"][0]["input"]
    assert len(alltoall) == 1  # one collective of the job: rank 1's splits its own
    assert [v["value"] for v in alltoall[0]["kwargs"]["output_split_sizes"]["value"]] == [3, 5]
    assert [v["value"] for v in alltoall[0]["ranks"]["1"]["kwargs"]["output_split_sizes"][
        "value"]] == [5, 3]
    step = json.loads((tmp_path / "job.step.json").read_text())
    assert step["version"] == 2 and [r["rank"] for r in step["ranks"]] == [0, 1]
    calls = step["ranks"][0]["calls"]
    assert [c["run"].split("|")[0] for c in calls] == ["aten::mul", "c10d::allreduce_",
                                                       "aten::mul", "c10d::alltoall_base_"]
    assert calls[2]["waits"] == [1]  # waited where the original read what it reduced
    assert calls[1]["comm_us"] == 425.0
    assert step["ranks"][0]["original"]["communication"]["comm_us"] == 635.0
    # the spans less what the muls cover (10 µs); the collectives' own calls hide nothing
    assert step["ranks"][0]["original"]["communication"]["exposed_us"] == 590.0
    planned = param_compute.run(out, dry_run=True, replay_step=True).records
    # rank 0's part, in the job's order: collectives, its step, then compute
    assert [r["op_name"] for r in planned] == ["c10d::allreduce_", "c10d::alltoall_base_",
                                               "step_replay", "aten::mul"]


def test_backend_spans_pair_with_their_calls_in_order_whatever_their_ids():
    """A call's node may be numbered after its backend span began (FSDP's reduce-scatter,
    which gloo runs as an all-reduce over its own buffer): one span per call pairs in order."""
    from param_compute.capture.trace.comms import backend_nodes
    from param_compute.capture.trace.walk import TraceTree

    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0},
             {"id": 9, "name": "gloo:all_reduce", "ctrl_deps": 1, "inputs": {"values": []}},
             {"id": 10, "name": "c10d::_reduce_scatter_base_", "ctrl_deps": 1,
              "inputs": {"values": []}},
             {"id": 14, "name": "c10d::_allgather_base_", "ctrl_deps": 1,
              "inputs": {"values": []}},
             {"id": 15, "name": "gloo:all_gather", "ctrl_deps": 1, "inputs": {"values": []}}]
    tree = TraceTree({"nodes": nodes})
    pairs = backend_nodes(tree, [nodes[2], nodes[3]])
    assert {call: span["name"] for call, span in pairs.items()} == {
        10: "gloo:all_reduce", 14: "gloo:all_gather"}


def test_ranks_that_disagree_on_their_collectives_are_refused(tmp_path, capsys):
    files = _files(tmp_path)
    trace = json.loads((tmp_path / "et1.json").read_text())
    trace["nodes"] = [n for n in trace["nodes"] if n.get("name") != "c10d::alltoall_base_"]
    (tmp_path / "et1.json").write_text(json.dumps(trace))
    assert capture_main(files + ["-o", str(tmp_path / "j.json")]) == 2
    err = capsys.readouterr().err
    assert "group 0: its ranks issued different numbers of collectives (rank 0: 2, rank 1: 1)" \
        in err
    assert not (tmp_path / "j.json").exists()
    # a rank missing
    assert capture_main(files[:4] + ["-o", str(tmp_path / "j.json")]) == 2
    assert "no trace of rank(s) 0" in capsys.readouterr().err


def test_distributed_info_is_checked_and_exposed_time_is_what_compute_does_not_cover():
    with pytest.raises(ValueError) as caught:
        distributed_info({"distributedInfo": {"rank": 3, "world_size": 2}}, "k.json")
    assert "k.json: distributedInfo: rank must be an integer from 0 to 1" in str(caught.value)
    assert distributed_info({}, "k.json") is None
    assert uncovered([(0, 10), (5, 20)], [(2, 4), (15, 30)]) == 13
    with pytest.raises(JobError):
        JobCapture([], [])  # no rank at all


def test_collective_arguments_in_torch_distributed_form():
    tensor = {"type": "tensor", "dtype": "float", "shape": [4]}
    args, kwargs = collective_call("broadcast_", {
        "tensors": {"type": "genericlist", "value": [tensor]},
        "root_rank": {"type": "int", "value": 1}, "async_op": {"type": "bool", "value": False}},
        "0")
    assert args == [tensor] and kwargs["group_src"]["value"] == 1
    assert kwargs["async_op"]["value"] is False
    assert replay_path("allreduce_", [0, 0]) == [0] and replay_path("alltoall_base_", [1]) == [1]
    assert replay_path("allgather_", [0, 0]) is None


def test_a_collectives_original_is_the_median_over_the_traces_steps(tmp_path, capsys):
    """Most of a collective's time is the wait for the other ranks, which one slow step can
    multiply: the original is the median over the trace's steps, as the replay's is."""
    paths = _files(tmp_path)
    for rank in (0, 1):
        kin = tmp_path / f"kin{rank}.json"
        kineto = json.loads(kin.read_text())
        steps = []
        for step, reduce_us in enumerate((400.0, 480.0, 4000.0)):  # one slow step
            for event in kineto["traceEvents"]:
                # a profile of other steps than the execution trace's: ids that do not
                # meet, joined by name, each call to its three occurrences
                copy = {**event, "ts": event["ts"] + 10000 * step,
                        "args": {"Record function id": 100 * (step + 1) + event["args"][
                            "Record function id"]}}
                if event["name"] == "gloo:all_reduce":
                    copy["dur"] = reduce_us
                steps.append(copy)
        kineto["traceEvents"] = steps
        kin.write_text(json.dumps(kineto))
    out = tmp_path / "job.json"
    assert capture_main(paths + ["-o", str(out), "--target-device", "cpu"]) == 0
    calls = json.loads((tmp_path / "job.step.json").read_text())["ranks"][0]["calls"]
    # issue (15 µs) to the span's end (40 µs + its duration): 425, 505, 4025: the median
    assert calls[1]["comm_us"] == 505.0
    spec = json.loads(out.read_text())
    assert spec["c10d::allreduce_"]["config"][0]["input"][0]["ranks"]["0"]["original_us"][
        "comm"] == 505.0


def test_a_synchronous_collective_is_timed_to_its_works_completion_not_its_return():
    """The original's communication runs to its backend span's end; a synchronous call returns
    later, when its rank is scheduled again: the replay stamps the work's completion (its
    future) for synchronous collectives too, no later than the call's end, all of it exposed."""
    from types import SimpleNamespace

    from param_compute.runtime.step_replay import StepReplay

    def call(collective, issues=False):
        return SimpleNamespace(collective=collective, issues=issues, failed=None)

    replay = SimpleNamespace(calls=[call(False), call(True), call(True), call(True),
                                    call(True, issues=True)])
    replay._comm = {"issued": {1: 1_000, 2: 5_000, 4: 9_000},
                    "done": {1: 3_000, 2: 20_000, 4: 9_500}, "wait_ns": 700}
    # call 1: done 2 µs after its issue, returned 4 µs after; call 2: its future's callback
    # ran after the wait returned; call 3: no future (stamps missing): the call's own time
    times = [100, 4_000, 6_000, 2_500, 50]
    result = StepReplay.end_comm_pass(replay, times)
    assert result["per_call"] == {1: 2_000, 2: 6_000, 3: 2_500, 4: 500}
    assert result["exposed_ns"] == 700 + 4_000 + 6_000 + 2_500


def test_a_synchronous_collective_in_a_step_waits_its_work_before_the_next_call():
    """Bound as issue-and-keep like an async one, a synchronous collective's work is waited
    in the same call: in the checked pass and in every timed loop."""
    from param_compute.runtime.step_replay import StepReplay

    log = []

    class Work:
        def wait(self):
            log.append("wait")

        def get_future(self):
            raise RuntimeError("no future")  # the call's own time then

    def collective(tensor):
        log.append("issue")
        return [tensor], Work()

    def compute(tensor):
        log.append("compute")
        return tensor

    t = torch.ones(2)
    replay = StepReplay.__new__(StepReplay)
    replay._comm = None
    plan = [(0, replay._issue_and_wait(collective, 0), [t], {}, (), (), (), 0, (), False),
            (1, compute, [t], {}, (), (), (), 0, (), False)]
    replay._plan, replay.works, replay.pending, replay.tail_wait_ns = plan, [None, None], \
        False, 0
    replay.clock = type("HostClock", (), {"name": "host"})()
    replay._loop([None], None, False, None, False, None, [-1])
    assert log == ["issue", "wait", "compute"]
    log.clear()
    times, ticks = [None, None], iter(range(0, 10**6, 10))
    replay._comm = {"issued": {}, "done": {}, "wait_ns": 0}
    replay._loop([None], times, False, lambda: next(ticks), False, replay._comm, [-1])
    assert log == ["issue", "wait", "compute"] and times == [10, 10]
    assert list(replay._comm["issued"]) == [0] and not replay.pending  # the collective's


class _Observer:
    """The execution-trace observer's bookkeeping, as torch's does it: a call's id when it
    begins, its parent the top of its thread's stack then; a call that ends pops the top,
    whatever that is, and its node is written then. ``span`` calls begin or end on a backend
    thread while filed under this one, as a collective's ``gloo:`` span is."""

    def __init__(self):
        self.nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|thread]",
                       "ctrl_deps": 0, "attrs": [{"name": "tid", "value": 1}]}]
        self.stack, self.next, self.open = [1], 2, {}

    def begin(self, key, name, schema="", types=(), values=(), shapes=()):
        node = _node(self.next, name, schema, list(types), list(values), list(shapes),
                     parent=self.stack[-1])
        node["attrs"].append({"name": "tid", "type": "uint64", "value": 1})
        self.open[key] = node
        self.stack.append(self.next)
        self.next += 1

    def end(self, key):
        self.stack.pop()
        self.nodes.append(self.open.pop(key))

    def call(self, key, *args, **kwargs):
        self.begin(key, *args, **kwargs)
        self.end(key)


def _shifted_trace():
    """An autograd node whose ``aten::empty`` was on top when gloo's thread began an earlier
    all-reduce's span: the empty's end popped the span's id, so the all-to-all after it was
    filed under the empty (which had ended), as a real gloo trace has it."""
    ob = _Observer()
    mul = dict(schema=MUL, types=["Tensor(float)", "Tensor(float)"],
               values=[_t(10, 64), _t(11, 64)], shapes=[[64], [64]])
    ob.call("mul", "aten::mul", **mul)
    ob.begin("hook", "autograd::engine::evaluate_function: MulBackward0")  # DDP's hook
    ob.call("allreduce", "c10d::allreduce_", ALLREDUCE,
            ["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"],
            [[_t(12, 64)], "<Object>", "<Object>", "<None>", True, -1],
            [[[64]], [], [], [], [], []])
    ob.end("hook")
    ob.begin("backward", "autograd::engine::evaluate_function: _AlltoAllSingleBackward")
    ob.begin("function", "_AlltoAllSingleBackward")
    ob.begin("empty", "aten::empty", str(torch.ops.aten.empty.memory_format._schema),
             ["GenericList[Int]", "None", "None", "None", "None", "None"],
             [[8], "<None>", "<None>", "<None>", "<None>", "<None>"], [[[]], [], [], [], [],
                                                                     []])
    ob.begin("span", "gloo:all_reduce")  # on gloo's thread, filed under this one
    ob.end("empty")  # pops the span's id: the empty stays on the stack
    ob.call("alltoall", "c10d::alltoall_base_", ALLTOALL,
            ["Tensor(float)", "Tensor(float)", "Object", "GenericList[Int,Int]",
             "GenericList[Int,Int]", "Bool", "Int"],
            [_t(20, 8), _t(21, 8), "<Object>", [4, 4], [4, 4], False, -1],
            [[8], [8], [], [[], []], [[], []], [], []])
    ob.end("function")
    ob.end("backward")
    ob.end("span")  # gloo's thread: pops whatever is on top
    ob.call("mul2", "aten::mul", **mul)
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": ob.nodes}


def test_parents_the_observer_filed_wrong_around_a_backend_span_are_rebuilt():
    from param_compute.capture.trace.walk import TraceTree, replay_level_nodes

    trace = _shifted_trace()
    recorded = {n["name"]: n["ctrl_deps"] for n in trace["nodes"]}
    by_name = {n["name"]: n["id"] for n in trace["nodes"]}
    assert recorded["c10d::alltoall_base_"] == by_name["aten::empty"]  # the damage
    given = copy.deepcopy(trace)
    tree = TraceTree(given)
    taken = [n["name"] for n in replay_level_nodes(tree)[0]]
    assert taken == ["aten::mul", "c10d::allreduce_", "aten::empty", "c10d::alltoall_base_",
                     "aten::mul"]
    assert tree.parent_of(tree.by_id[by_name["c10d::alltoall_base_"]]) == by_name[
        "_AlltoAllSingleBackward"]
    assert given == trace  # the caller's trace left as it was
    assert tree.repaired["links"] == 1 and tree.repaired["threads"] == 1
    # a file in start order (re-sorted by id: every parent before its children) is not the
    # observer's end order: left as it is, whatever its spans
    resorted = copy.deepcopy(trace)
    resorted["nodes"].sort(key=lambda n: n["id"])
    tree = TraceTree(resorted)
    assert tree.repaired is None
    assert "c10d::alltoall_base_" not in [n["name"] for n in replay_level_nodes(tree)[0]]
    # a healthy trace (no span on the thread) is not touched
    healthy = copy.deepcopy(trace)
    healthy["nodes"] = [n for n in healthy["nodes"] if n["name"] != "gloo:all_reduce"]
    assert TraceTree(healthy).repaired is None


def test_a_capture_says_it_rebuilt_parents_and_keeps_the_call_the_trace_hid(tmp_path, capsys):
    from param_compute.capture.trace.execution_trace import capture_execution_trace

    workload = capture_execution_trace(_shifted_trace(), source="et.json")
    assert [c["config"][0] for c in workload.step.calls] == [
        "aten::mul", "c10d::allreduce_", "aten::empty", "c10d::alltoall_base_", "aten::mul"]
    assert workload.report()["nesting_repaired"]["links"] == 1
    assert any(line.startswith("  nesting: 1 parent links rebuilt") for line in
               workload.summary_lines())


def test_a_collectives_in_step_time_is_its_calls_medians_as_the_originals_is():
    """Each call's median over the call-timed steps, averaged over the config's calls: the
    capture's statistic for the original. Skewed times (a collective that waits 1 or 9 ms)
    would make a median of per-step means another number."""
    from types import SimpleNamespace

    from param_compute.runtime.step_run import communication

    call = SimpleNamespace(collective=True, failed=None, run_key="c10d::alltoall_base_|0|0|0")
    other = SimpleNamespace(collective=False, failed=None, run_key="aten::mm|0|0|0")
    replay = SimpleNamespace(calls=[call, other, call], step={"calls": [
        {"comm_us": 1000.0}, {}, {"comm_us": 3000.0}]})
    # per step, µs as ns: call 0 is 1, 1, 9 ms; call 2 is 9, 1, 1 ms
    passes = [{"per_call": {0: 1e6, 2: 9e6}, "exposed_ns": 0},
              {"per_call": {0: 1e6, 2: 1e6}, "exposed_ns": 0},
              {"per_call": {0: 9e6, 2: 1e6}, "exposed_ns": 0}]
    row = communication(replay, passes)["collectives"]["c10d::alltoall_base_|0|0|0"]
    assert row == {"comm_us": 1000.0, "original_comm_us": 2000.0}  # not 5000: per-step means
    # a call with no timed step leaves the config without a figure, never a partial mean
    passes = [{"per_call": {0: 1e6}, "exposed_ns": 0}]
    assert communication(replay, passes)["collectives"][call.run_key]["comm_us"] is None
