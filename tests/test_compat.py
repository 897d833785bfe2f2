"""The compatibility contract: dry runs of PARAM's own specs equal PARAM's expansions."""

from __future__ import annotations

import json

import pytest

import param_compute
from conftest import SHARED_CONFIGS, read_results, run_cli

SPEC_NAMES = sorted(p.stem for p in SHARED_CONFIGS.glob("*.json")) if SHARED_CONFIGS.is_dir() \
    else []


def _normalized(record: dict) -> str:
    # The shared README: an empty build list and a missing build both mean "no build".
    config = dict(record["config"], build=record["config"]["build"] or None)
    return json.dumps({"op_name": record["op_name"], "id": record["id"], "config": config},
                      sort_keys=True)


def _expected(shared, name):
    path = shared / "expected" / f"{name}.expected.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_all_twelve_specs_are_present(shared_configs):
    assert len(SPEC_NAMES) == 12


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_dry_run_equals_param_expansion(shared_configs, name):
    result = param_compute.run(shared_configs / f"{name}.json", dry_run=True)
    expected = _expected(shared_configs, name)
    assert [r["status"] for r in result.records] == ["dry-run"] * len(expected)
    if name == "split_table_batched_embeddings_ops":
        # Its input layout is PARAM's own (see the shared README): ids are the contract, and our
        # iterator happens to reproduce the layout too.
        assert [r["id"] for r in result.records] == [e["id"] for e in expected]
        assert [r["config"] for r in result.records] == [e["config"] for e in expected]
    else:
        assert [_normalized(r) for r in result.records] == [_normalized(e) for e in expected]


def test_no_macro_key_survives_anywhere(shared_configs):
    for name in SPEC_NAMES:
        for record in param_compute.run(shared_configs / f"{name}.json", dry_run=True).records:
            text = json.dumps(record["config"])
            assert "__range__" not in text and "__copy__" not in text and "__list__" not in text


def test_cli_dry_run_writes_the_same_runs_and_allocates_nothing(shared_configs, tmp_path):
    out = tmp_path / "dry.json"
    result = run_cli("-c", shared_configs / "mm_range.json", "--dry-run", "--output", out)
    assert result.returncode == 0, result.stderr
    header, runs, finish = read_results(out)
    assert header["run_options"]["dry_run"] is True
    assert [_normalized(r) for r in runs] == \
        [_normalized(e) for e in _expected(shared_configs, "mm_range")]
    assert all(r["metric"] == {} and "stats" not in r for r in runs)  # nothing measured
    assert finish["runs_dry"] == 70 and "finish_time" in finish
