"""Run comparison: the two-sample statistics and ``python -m param_compute.analysis.compare``."""

from __future__ import annotations

import csv
import itertools
import json
import random
import statistics

import pytest

from conftest import run_cli, simple_op, tensor, write_spec
from param_compute.analysis.significance import compare_samples, mann_whitney, median_ratio_interval

SPEC = simple_op("torch.add", tensor(64, 256), {"type": "int", "value": [1, 4],
                                                "__range__": ["value"]},
                 iterator="RangeConfigIterator")


def _brute_force_p(base, new):
    """Two-sided permutation p-value of U over every split of the pooled values."""
    pooled, n, m = base + new, len(new), len(base)
    observed = abs(sum(a > b for a in new for b in base) - m * n / 2)
    hits = total = 0
    for chosen in itertools.combinations(range(m + n), n):
        rest = [pooled[i] for i in range(m + n) if i not in chosen]
        u = sum(pooled[i] > b for i in chosen for b in rest)
        hits += abs(u - m * n / 2) >= observed - 1e-9
        total += 1
    return hits / total


@pytest.mark.parametrize("m,n,shift", [(4, 4, 0.4), (5, 3, 0.1), (6, 7, 0.3), (3, 3, 2.0)])
def test_mann_whitney_exact_p_matches_the_permutation_distribution(m, n, shift):
    rng = random.Random(m * 10 + n)
    base = [rng.random() for _ in range(m)]
    new = [rng.random() + shift for _ in range(n)]
    assert mann_whitney(base, new)[1] == pytest.approx(_brute_force_p(base, new))


def test_mann_whitney_large_samples_use_the_normal_approximation():
    rng = random.Random(3)
    base = [rng.gauss(0, 1) for _ in range(200)]
    assert mann_whitney(base, [v + 1 for v in base])[1] < 1e-6
    assert mann_whitney(base, base)[1] == pytest.approx(1.0)
    assert mann_whitney([1.0] * 5, [1.0] * 5) == (12.5, 1.0)  # all tied


def test_bootstrap_interval_matches_plain_resampling():
    rng = random.Random(7)
    base = [rng.lognormvariate(0, 0.3) for _ in range(9)]
    new = [v * 1.2 for v in base]
    low, high = median_ratio_interval(base, new, resamples=4000)
    ratios = sorted(statistics.median(rng.choices(new, k=9))
                    / statistics.median(rng.choices(base, k=9)) for _ in range(8000))
    assert low == pytest.approx(ratios[200], rel=0.08)
    assert high == pytest.approx(ratios[7800], rel=0.08)


def test_significance_call():
    base = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98, 1.01]
    assert compare_samples(base, base).verdict == "same"
    doubled = compare_samples(base, [2 * v for v in base])
    assert doubled.verdict == "slower" and doubled.significant
    assert doubled.speedup == pytest.approx(0.5) and doubled.change_pct == pytest.approx(100)
    assert compare_samples(base, [v / 2 for v in base]).verdict == "faster"
    assert compare_samples(base[:3], [2 * v for v in base[:3]]).verdict == "same"  # n too small


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    base = tmp / "base.json"
    result = run_cli("-c", write_spec(tmp, SPEC), "-w", "2", "-i", "8", "--output", base)
    assert result.returncode == 0, result.stderr
    # The measured file's layout, with its times set to fixed samples (a 14% spread): what the
    # verdicts below say must not depend on how loaded this machine was while measuring.
    lines = []
    for number, line in enumerate(base.read_text().splitlines()):
        value = json.loads(line)
        for metric in (value.get("metric") or {}).values():
            metric["measure.time"] = [(10.0 + number) * (1 + 0.02 * k)
                                      for k in (0, 3, 1, 4, 2, 5, 7, 6)]
        lines.append(json.dumps(value))
    base.write_text("\n".join(lines) + "\n")
    doubled, fewer = [], []
    for number, line in enumerate(lines):
        value = json.loads(line)
        for metric in (value.get("metric") or {}).values():
            metric["measure.time"] = [2 * t for t in metric["measure.time"]]
        doubled.append(json.dumps(value))
        if number != 2:  # drop the second run
            fewer.append(line)
    (tmp / "doubled.json").write_text("\n".join(doubled) + "\n")
    (tmp / "fewer.json").write_text("\n".join(fewer) + "\n")
    return tmp


def _compare(*args):
    return run_cli(*args, module="param_compute.analysis.compare")


def test_doubled_times_fail_the_regression_gate(runs, tmp_path):
    result = _compare(runs / "base.json", runs / "doubled.json", "--fail-on-regression", "20",
                      "--csv", tmp_path / "c.csv")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "regression" in result.stdout and "slower" in result.stdout
    with open(tmp_path / "c.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert len(rows) == 4
    for row in rows:
        assert float(row["speedup"]) == pytest.approx(0.5)
        assert float(row["ratio_low"]) <= 2.0 <= float(row["ratio_high"])
    assert sum(row["verdict"] == "slower" for row in rows) >= 3
    # the same pair without a gate, or with a gate above the change, passes
    assert _compare(runs / "base.json", runs / "doubled.json").returncode == 0
    assert _compare(runs / "base.json", runs / "doubled.json", "--fail-on-regression",
                    "150").returncode == 0


def test_a_run_compared_with_itself_passes(runs):
    result = _compare(runs / "base.json", runs / "base.json", "--fail-on-regression", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1.000x" in result.stdout and "slower" not in result.stdout.split("geometric")[0]


def test_runs_in_one_file_only_are_listed(runs):
    result = _compare(runs / "fewer.json", runs / "base.json")
    assert result.returncode == 0
    assert "only in NEW: 1: torch.add|0|0|0_1" in result.stdout


@pytest.mark.parametrize("content,message", [
    (None, "no such file"),
    ('{"torch.add": {"config": []}}', "first line is not a header"),
    ("{\n", "not JSON"),
    ("[1, 2]\n", "JSON list, not an object"),
])
def test_bad_input_exits_2_with_a_message(runs, tmp_path, content, message):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    for args in ((bad, runs / "base.json"), (runs / "base.json", bad)):
        result = _compare(*args)
        assert result.returncode == 2
        assert message in result.stderr and "Traceback" not in result.stderr


def test_names_from_a_file_are_shown_as_they_are_never_as_markup_or_escapes(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # wide enough for the whole name in both tables
    op = "[/bold][link=http://x.example]mm[/link]\x1b[31m"
    lines = []
    for name, median in (("base", 1.0), ("new", 2.0)):
        record = {"op_name": op, "id": "0|0|0", "status": "ok",
                  "metric": {"forward": {"measure.time": [median] * 5}},
                  "stats": {"forward": {"median": median, "n": 5}}, "config": {}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"run_options": {}, "sys_info": {}}) + "\n"
                        + json.dumps(record) + "\n")
        lines.append(path)
    done = _compare(*lines)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    shown = "[/bold][link=http://x.example]mm[/link]\\x1b[31m"
    rows = [line for line in done.stdout.splitlines() if shown in line]
    assert len(rows) == 2, done.stdout  # the compare row and the geometric-mean row
    assert "\x1b" not in done.stdout


def test_settings_from_a_header_are_shown_as_they_are(tmp_path):
    paths = []
    for name, device in (("base", "cpu"), ("new", "[/bold]\x1b[2J")):
        record = {"op_name": "torch.mm", "id": "0|0|0", "status": "ok",
                  "metric": {"forward": {"measure.time": [1.0] * 5}},
                  "stats": {"forward": {"median": 1.0, "n": 5}}, "config": {}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"run_options": {"device": device}, "sys_info": {}}) + "\n"
                        + json.dumps(record) + "\n")
        paths.append(path)
    done = _compare(*paths, "--fail-on-regression", "10")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "\x1b" not in done.stdout
    said = " ".join(done.stdout.split())  # lines wrap at the width (120 here)
    assert "settings differ: device: 'cpu' in BASE, '[/bold]\\x1b[2J' in NEW" in said
    assert said.split("regression gate failed: ")[-1].startswith(
        "settings differ (device: 'cpu' in BASE, '[/bold]\\x1b[2J' in NEW")  # said last
    assert max(len(line) for line in done.stdout.splitlines()) <= 120
