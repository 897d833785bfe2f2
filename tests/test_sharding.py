"""Scale-out: cost-balanced shards (--shard I/N, torchrun) and merging their results."""

from __future__ import annotations

import json

import pytest

import param_compute
from conftest import ZYGOTE, read_results, run_cli, simple_op, tensor, write_spec
from param_compute.errors import OptionsError
from param_compute.analysis.merge import main as merge_main
from param_compute.plan.runkey import id_order
from param_compute.plan.sharding import Shard, lpt_assign, resolve_shard

SPEC = {
    # an expensive matmul sweep and many cheap adds: round robin would be badly unbalanced
    "torch.mm": {"input_iterator": "RangeConfigIterator",
                 "input_data_generator": "PyTorch:DefaultDataGenerator",
                 "config": [{"input": [{"args": [
                     {"type": "tensor", "dtype": "float", "shape": [[64, 256, 64], 256],
                      "__range__": ["shape"]},
                     tensor(256, 256)]}]}]},
    **simple_op("torch.add", tensor(4, 4), {"type": "int", "value": [1, 12],
                                            "__range__": ["value"]},
                iterator="RangeConfigIterator"),
}


def test_lpt_assignment_is_balanced_and_deterministic():
    costs = [10.0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    owner = lpt_assign(costs, 2)
    assert owner == lpt_assign(list(costs), 2)
    loads = [sum(c for c, o in zip(costs, owner) if o == s) for s in (0, 1)]
    assert loads == [10.0, 10.0]  # round robin would give 15 / 5
    assert owner[0] == 0 and set(owner[1:]) == {1}
    # the greedy bound: never above 4/3 of the optimum (here the mean load is optimal)
    costs = [7.0, 7, 6, 6, 5, 5, 4, 4, 4]
    owner = lpt_assign(costs, 3)
    assert max(sum(c for c, o in zip(costs, owner) if o == s) for s in range(3)) <= 4 / 3 * 16
    assert sorted(set(lpt_assign([1.0] * 5, 5))) == [0, 1, 2, 3, 4]  # nobody left out
    assert lpt_assign([1.0, 1.0], 3) == [0, 1]


def test_resolve_shard_from_option_and_torchrun_environment():
    assert resolve_shard(None, {}) is None
    assert resolve_shard("1/3", {}) == Shard(1, 3, "--shard")
    assert resolve_shard(None, {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == Shard(
        1, 2, "torchrun", 1)
    assert resolve_shard(None, {"RANK": "0", "WORLD_SIZE": "1"}) is None  # one process
    for bad in ("3/3", "1", "a/b", "-1/2", "0/0"):
        with pytest.raises(OptionsError):
            resolve_shard(bad, {})
    with pytest.raises(OptionsError):
        resolve_shard(None, {"RANK": "x", "WORLD_SIZE": "2"})
    shard = Shard(0, 2, "torchrun", local_rank=1)
    assert shard.device("cuda") == "cuda:1" and shard.device("cpu") == "cpu"
    assert shard.device("cuda:0") == "cuda:0"
    assert str(shard.path("out/r.json")) == "out/r.shard0of2.json"
    assert str(shard.path("r")) == "r.shard0of2"


def test_run_key_order_sorts_ids_as_the_plan_does():
    ops = ["b", "a"]
    ids = ["0|0|0_2", "0|0|0_10", "0|0|1_0", "1|0|0", "1|0_1|3"]
    keys = [id_order(ops, "b", i) for i in ids] + [id_order(ops, "a", "0|0|0")]
    assert keys == sorted(keys)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Shards 0 and 1 of 2 of SPEC (dry runs) and the unsharded dry run."""
    tmp = tmp_path_factory.mktemp("shards")
    spec = write_spec(tmp, SPEC)
    for index in (0, 1):
        result = run_cli("-c", spec, "--dry-run", "--shard", f"{index}/2", "--output",
                         tmp / "out.json", "--csv", tmp / "out.csv")
        assert result.returncode == 0, result.stderr
    return tmp


def test_shards_split_the_runs_by_estimated_cost(sharded):
    heads, runs = [], []
    for index in (0, 1):
        header, records, _ = read_results(sharded / f"out.shard{index}of2.json")
        assert (sharded / f"out.shard{index}of2.csv").is_file()
        heads.append(header["shard"])
        runs.append(records)
        assert header["shard"]["index"] == index and header["shard"]["count"] == 2
        assert header["shard"]["runs"] == len(records) > 0
    assert not ({r["id"] for r in runs[0] if r["op_name"] == "torch.mm"}
                & {r["id"] for r in runs[1] if r["op_name"] == "torch.mm"})
    assert sum(len(r) for r in runs) == heads[0]["total_runs"] == 16
    costs = heads[0]["estimated_shard_costs"]
    assert max(costs) / min(costs) < 1.5  # the 4 matmuls dominate; each shard gets 2
    assert [sum(r["op_name"] == "torch.mm" for r in shard) for shard in runs] == [2, 2]


def _merge(*args):
    return run_cli(*args, module="param_compute.analysis.merge")


def test_merge_restores_the_unsharded_order(sharded):
    out = sharded / "merged.json"
    result = _merge("-o", out, sharded / "out.shard1of2.json", sharded / "out.shard0of2.json")
    assert result.returncode == 0, result.stderr
    header, records, last = read_results(out)
    expected = param_compute.run(SPEC, dry_run=True).records
    assert [(r["op_name"], r["id"]) for r in records] == [
        (r["op_name"], r["id"]) for r in expected]
    assert [r["config"] for r in records] == [r["config"] for r in expected]
    shards = header["merged_shards"]["shards"]
    assert [s["index"] for s in shards] == [0, 1] and header["merged_shards"]["missing"] == []
    assert sum(s["runs"] for s in shards) == 16 and last["runs_dry"] == 16


def test_merge_refuses_what_does_not_fit(sharded, tmp_path, capsys):
    def merge(*args):  # in-process: the command's own exit status and messages
        status = merge_main([str(a) for a in args])
        return status, capsys.readouterr().err

    shard0, shard1 = sharded / "out.shard0of2.json", sharded / "out.shard1of2.json"
    out = tmp_path / "m.json"
    cases = [((shard0,), "missing shard(s) 1"),
             ((shard0, shard0), "shard 0 given twice"),
             ((shard0, tmp_path / "nope.json"), "no such file")]
    # a record of shard 0 copied into shard 1 with other results: a conflicting duplicate
    lines = shard1.read_text().splitlines()
    stolen = json.loads(shard0.read_text().splitlines()[1])
    stolen["status"] = "ok"
    (tmp_path / "conflict.json").write_text("\n".join([lines[0], json.dumps(stolen),
                                                       *lines[1:]]) + "\n")
    cases.append(((shard0, tmp_path / "conflict.json"), "with different results"))
    # the same record twice, identical: kept once
    same = json.loads(shard0.read_text().splitlines()[1])
    (tmp_path / "same.json").write_text("\n".join([lines[0], json.dumps(same), *lines[1:]])
                                        + "\n")
    # an unsharded results file is no shard
    header = json.loads(lines[0])
    del header["shard"]
    (tmp_path / "plain.json").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    cases.append(((shard0, tmp_path / "plain.json"), "not a shard file"))
    for files, message in cases:
        status, err = merge("-o", out, *files)
        assert status == 2, files
        assert message in err
    assert merge("-o", out, shard0, tmp_path / "same.json")[0] == 0
    _, records, _ = read_results(out)
    assert len(records) == len({(r["op_name"], r["id"]) for r in records}) == 16
    assert merge("--partial", "-o", out, shard0)[0] == 0


def test_torchrun_two_processes_shard_and_merge(shared_configs, tmp_path):
    spec = shared_configs / "simple_add_range.json"
    # torchrun itself is forked from the tests' zygote; the two ranks it starts are fresh.
    torchrun = ZYGOTE.start(["--standalone", "--nproc-per-node", "2", "-m",
                             "param_compute.cli.run_benchmark", "-c", spec, "-w", "0", "-i", "1",
                             "--output", tmp_path / "out.json", "--no-progress"],
                            module="torch.distributed.run")
    _, stderr = torchrun.communicate(timeout=300)
    assert torchrun.returncode == 0, stderr[-3000:]
    shards = [tmp_path / f"out.shard{i}of2.json" for i in (0, 1)]
    counts = []
    for index, path in enumerate(shards):
        header, records, last = read_results(path)
        assert header["shard"]["source"] == "torchrun" and header["shard"]["index"] == index
        assert records and all(r["status"] == "ok" for r in records)
        counts.append(len(records))
    assert sum(counts) == 33 and min(counts) >= 10
    merged = tmp_path / "merged.json"
    assert _merge("-o", merged, *shards).returncode == 0
    _, records, last = read_results(merged)
    ids = [(r["op_name"], r["id"]) for r in records]
    dry = param_compute.run(spec, dry_run=True).records
    assert len(set(ids)) == 33 and ids == [(r["op_name"], r["id"]) for r in dry]
    assert last["runs_ok"] == 33
