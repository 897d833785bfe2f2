"""Run filters: ``--only``, ``-k`` and ``--input-id`` select runs of real specs; the dry run lists
what they select; a filter that selects nothing is an error naming it."""

from __future__ import annotations

import pytest

import param_compute
from conftest import EXAMPLES, read_results, run_cli
from param_compute.plan.filters import FilterError, RunFilter, check_selection
from param_compute.plan.runplan import PlannedRun

SWEEP = EXAMPLES / "matmul_sweep.json"
MODULES = EXAMPLES / "modules_and_aten.json"


def _dry(tmp_path, spec, *flags):
    out = tmp_path / "dry.json"
    result = run_cli("-c", spec, "--dry-run", "--output", out, *flags)
    assert result.returncode == 0, result.stderr
    _, records, _ = read_results(out)
    return [(r["op_name"], r["id"]) for r in records], result


def test_only_runs_only_the_named_operator(tmp_path):
    selected, result = _dry(tmp_path, SWEEP, "--only", "torch.mm")
    assert selected == [("torch.mm", f"0|0|0_{i}") for i in range(8)]
    assert "8 planned (dry run), 4 skipped" in result.stdout + result.stderr


def test_only_globs_are_repeatable(tmp_path):
    selected, _ = _dry(tmp_path, MODULES, "--only", "torch.nn.*", "--only", "aten::mul")
    assert [op for op, _ in selected] == ["torch.nn.Linear", "torch.nn.functional.gelu",
                                          "aten::mul"]
    selected, _ = _dry(tmp_path, MODULES, "--only", "*gelu")
    assert selected == [("torch.nn.functional.gelu", "0|0|0")]


def test_k_matches_shapes_dtypes_and_ids(tmp_path):
    # 256×128 appears as a whole first or second operand of these five
    selected, _ = _dry(tmp_path, SWEEP, "-k", "256x128")
    assert selected == [("torch.mm", f"0|0|0_{i}") for i in (1, 3, 5, 6, 7)]
    selected, _ = _dry(tmp_path, SWEEP, "-k", "BF16")  # any case
    assert selected == [("torch.nn.functional.softmax", "0|0|0_2"),
                        ("torch.nn.functional.softmax", "0|0|0_3")]
    selected, _ = _dry(tmp_path, SWEEP, "-k", "*dim=1*", "-k", "f32")  # a glob, and both
    assert selected == [("torch.nn.functional.softmax", "0|0|0_1")]
    selected, _ = _dry(tmp_path, MODULES, "-k", "(256·512")  # a build's config
    assert selected == [("torch.nn.Linear", "0|0|0")]


def test_input_id_takes_an_input_id_a_run_id_or_a_key(tmp_path):
    selected, _ = _dry(tmp_path, SWEEP, "--input-id", "0_2")
    assert selected == [("torch.mm", "0|0|0_2"), ("torch.nn.functional.softmax", "0|0|0_2")]
    selected, _ = _dry(tmp_path, SWEEP, "--input-id", "torch.mm|0|0|0_5",
                       "--input-id", "torch.mm|0|0|0_6")
    assert selected == [("torch.mm", "0|0|0_5"), ("torch.mm", "0|0|0_6")]
    selected, _ = _dry(tmp_path, SWEEP, "--input-id", "0|0|0_3", "--only", "*softmax")
    assert selected == [("torch.nn.functional.softmax", "0|0|0_3")]


@pytest.mark.parametrize("flags, message", [
    (["--only", "torch.bmm"], "--only torch.bmm selects no run of the spec"),
    (["-k", "float64", "--only", "torch.mm"], "-k float64 selects no run of the spec"),
    (["--input-id", "9"], "--input-id 9 selects no run of the spec"),
    (["--only", "torch.mm", "-k", "bf16"],
     "--only torch.mm with -k bf16: each selects some runs, but no run matches them all"),
    (["-k", ""], "-k '': an empty filter; give a value or drop the flag"),
    (["--only", "torch.mm", "--only", " "], "--only '': an empty filter; give a value or drop "
                                            "the flag"),
    (["--input-id", ""], "--input-id '': an empty filter; give a value or drop the flag"),
])
def test_a_filter_that_selects_nothing_is_an_error_naming_it(tmp_path, flags, message):
    out = tmp_path / "r.json"
    result = run_cli("-c", SWEEP, "--output", out, *flags)
    assert result.returncode == 2
    assert f"error: {message}" in result.stderr
    assert not out.exists()  # refused before anything is written


def test_filters_select_measured_runs_in_the_library(tmp_path):
    result = param_compute.run(str(SWEEP), only="torch.mm", keywords=["64x"], warmup=0,
                               iteration=1, throughput=False)
    assert result.exit_status == 0
    assert [(r["op_name"], r["id"], r["status"]) for r in result.records] == [
        ("torch.mm", "0|0|0_0", "ok"), ("torch.mm", "0|0|0_1", "ok")]
    assert result.header["run_options"]["only"] == ["torch.mm"]
    assert result.header["run_options"]["keywords"] == ["64x"]


def _run(op, input_id, shape):
    config = {"args": [{"type": "tensor", "dtype": "float", "shape": shape}]}
    return PlannedRun(op, 0, 0, "0", None, input_id, config)


def test_check_selection_counts_and_names_the_empty_part():
    runs = [_run("torch.add", "0", [4, 4]), _run("torch.add", "1", [8, 8]),
            _run("torch.relu", "0", [8, 8])]
    assert check_selection(RunFilter(keywords=("8x8",)), runs) == 2
    assert check_selection(RunFilter(only=("torch.a*",), input_ids=("1",)), runs) == 1
    with pytest.raises(FilterError, match=r"^-k 16x16 selects no run of the spec$"):
        check_selection(RunFilter(only=("torch.add",), keywords=("16x16",)), runs)
    assert not RunFilter() and RunFilter(input_ids=("0",))


def test_k_is_an_expression_and_several_k_flags_are_an_and(tmp_path):
    mm = [("torch.mm", f"0|0|0_{i}") for i in range(8)]
    selected, _ = _dry(tmp_path, SWEEP, "-k", "torch.mm and not 256x128")
    assert selected == [run for run in mm if run[1][-1] not in "13567"]
    selected, _ = _dry(tmp_path, SWEEP, "-k", "bf16 or (*dim=1* and f32)")
    assert selected == [("torch.nn.functional.softmax", f"0|0|0_{i}") for i in (1, 2, 3)]
    # the old form: several -k, each one term, all must match -- the same as an 'and' of them
    several, _ = _dry(tmp_path, SWEEP, "-k", "*dim=1*", "-k", "f32")
    assert several == _dry(tmp_path, SWEEP, "-k", "*dim=1* and f32")[0]
    # without and/or/not, a label copied from the table is one term, spaces included
    selected, _ = _dry(tmp_path, SWEEP, "-k", "dim=1 bf16")
    assert selected == [("torch.nn.functional.softmax", "0|0|0_3")]


@pytest.mark.parametrize("expression, why", [("mm and", "ends too early"),
                                             ("(mm or add", "a '(' is never closed"),
                                             ("mm or or add", "unexpected 'or'")])
def test_an_unreadable_k_expression_is_refused_before_anything_runs(tmp_path, expression, why):
    out = tmp_path / "r.json"
    result = run_cli("-c", SWEEP, "--output", out, "-k", expression)
    assert result.returncode == 2
    assert f"error: -k {expression!r}: {why}" in result.stderr
    assert not out.exists()


def test_k_selects_the_same_runs_in_run_and_in_history(tmp_path):
    results, db = tmp_path / "all.json", tmp_path / "h.db"
    done = run_cli("-c", SWEEP, "-w", "0", "-i", "1", "--no-throughput", "--output", results)
    assert done.returncode == 0, done.stderr
    added = run_cli("add", results, "--label", "v1", "--db", db,
                    module="param_compute.cli.history")
    assert added.returncode == 0, added.stderr
    for expression in ("torch.mm and not 256x128", "bf16 or (*dim=1* and f32)", "*0_3",
                       "softmax and not (bf16 or dim=0)"):
        selected, _ = _dry(tmp_path, SWEEP, "-k", expression)
        shown = run_cli("show", "-k", expression, "--db", db,
                        module="param_compute.cli.history")
        assert shown.returncode == 0, shown.stderr
        keys = [line.split()[0] for line in shown.stdout.splitlines()
                if line and not line.startswith(" ")]
        assert keys == [f"{op}|{run_id}" for op, run_id in selected], expression


def test_the_k_language_binds_not_then_and_then_or_and_reads_globs_and_words():
    from param_compute.plan.keywords import KeywordError, keyword_matcher

    match = keyword_matcher("mm or add and not bf16")  # mm or (add and (not bf16))
    assert match(("torch.mm", "bf16")) and match(("torch.add", "f32"))
    assert not match(("torch.add", "bf16")) and not match(("torch.relu",))
    assert keyword_matcher("(mm or add) and not bf16")(("torch.add", "f32"))
    assert not keyword_matcher("(mm or add) and not bf16")(("torch.mm", "bf16"))
    glob = keyword_matcher("torch.m?")  # a glob matches a whole text; a word, a part of one
    assert glob(("torch.mm",)) and not glob(("torch.mm|0|0|0",))
    assert keyword_matcher("TORCH.MM")(("torch.mm|0|0|0",))  # texts come lower-cased
    with pytest.raises(KeywordError, match=r"^-k: an empty expression$"):
        keyword_matcher("  ")
