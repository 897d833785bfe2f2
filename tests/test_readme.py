"""The README stays true: it opens with the two commands (install and demo, the tests) that
``.ci/run`` also runs and the demo runs, its contents list every section, its five-minute
walkthrough does what it says, its sample run has the columns a run prints, and the suite time
it states is the one ``bench/suite_time.py`` checks. Paths, flags, doors, links and the map of
docs/ are checked with the other pages in ``tests/test_docs.py``."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from conftest import REPO, run_cli
from test_docs import anchors

README = REPO / "README.md"


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _section(title: str) -> str:
    return _text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _opening_commands():
    blocks = re.findall(r"\n    (\S[^\n]*)", _text().split("\n---", 1)[0])
    return blocks[0], blocks[1]


def test_the_readme_opens_with_the_install_and_test_commands_ci_runs():
    install, tests = _opening_commands()
    assert install.startswith("pip install -r requirements.txt && pip install -e . && "
                              "param-compute run -c examples/configs/")
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install -r requirements.txt && pip install -e ." in ci
    assert tests in ci, "CI runs the README's test command"
    assert tests == "python -m pytest -q -n auto"


def test_the_demo_command_runs(tmp_path):
    from param_compute.cli.main import BY_NAME

    install, _ = _opening_commands()
    words = shlex.split(install.split("&& ", 2)[2])
    assert words[0] == "param-compute"
    assert words[1] in BY_NAME
    args = [str(REPO / w) if w.startswith("examples/") else w for w in words[1:]]
    assert (REPO / words[words.index("-c") + 1]).is_file()
    # as the console script runs it: param-compute's -o names the results file
    done = run_cli(*args, "-o", tmp_path / "demo.json", "-q", module="param_compute.cli.main")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "demo.json").is_file()


def test_contents_lists_every_section_in_order():
    contents = _section("Contents")
    links = re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", contents)
    sections = [line[3:] for line in _text().splitlines()
                if line.startswith("## ") and line != "## Contents"]
    assert [title for title, _ in links] == sections, "the contents list every ## section"
    for title, target in links:
        assert target in anchors(README), f"contents link {title!r} -> #{target} goes nowhere"


@pytest.mark.parametrize("claim", [r"about a minute", r"\bthe CPU build; an unpinned",
                                   r"--step N\|all", r"One `\{\"step_replay\"",
                                   r"up to\s+200 columns"])
def test_no_stale_claims(claim):
    from test_docs import ALL

    for page in ALL:
        assert not re.search(claim, page.read_text(encoding="utf-8")), \
            f"stale claim still in {page.name}: {claim}"


def _walkthrough_spec() -> dict:
    section = _section("Five minutes: your first spec")
    return json.loads(section.split("```json", 1)[1].split("```", 1)[0])


def test_the_five_minute_walkthrough_does_what_it_says(tmp_path):
    section = _section("Five minutes: your first spec")
    spec = _walkthrough_spec()
    first = tmp_path / "first.json"
    first.write_text(json.dumps(spec))
    assert "param-compute run -c first.json --dry-run" in section
    planned = run_cli("-c", first, "--dry-run", "--output", tmp_path / "plan.json")
    assert planned.returncode == 0, planned.stderr
    assert "256×512·512×128 f32" in planned.stdout
    assert "1024×1024·1024×1024 bf16" in planned.stdout
    assert "param-compute run -c first.json -b -o first_results.json" in section
    done = run_cli("-c", first, "-b", "-i", "2", "--output", tmp_path / "first_results.json")
    assert done.returncode == 0, done.stderr
    report = run_cli(tmp_path / "first_results.json", "-o", tmp_path / "first.html",
                     module="param_compute.analysis.report")
    assert report.returncode == 0 and (tmp_path / "first.html").is_file(), report.stderr
    compared = run_cli(tmp_path / "first_results.json", tmp_path / "first_results.json",
                       module="param_compute.analysis.compare")
    assert compared.returncode == 0, compared.stderr
    op = spec["torch.mm"]  # step 3: the sweep, explained and filtered
    op["input_iterator"] = "RangeConfigIterator"
    op["config"][0]["input"][0]["args"][0].update(shape=[[256, 1024, 256], 512],
                                                  __range__=["shape"])
    first.write_text(json.dumps(spec))
    explained = run_cli("-c", first, "--explain")
    assert explained.returncode == 0, explained.stderr
    assert "args[0].shape[0]: 256, 512, 768, 1024" in explained.stdout
    expression = re.search(r'`-k "([^"]+)"`', section).group(1)
    picked = run_cli("-c", first, "-k", expression, "--dry-run", "--output",
                     tmp_path / "picked.json")
    assert picked.returncode == 0, picked.stderr
    assert "512×512·512×128 f32" in picked.stdout and "bf16" in picked.stdout
    assert "256×512" not in picked.stdout and "2 planned" in picked.stdout


def test_the_sample_run_has_the_columns_a_run_prints(tmp_path, monkeypatch):
    """The sample's command is the demo's, at the width it says, and the table it shows has the
    columns such a run prints (its numbers are one machine's)."""
    section = _section("What a run looks like")
    command = re.search(r"\$ (.*)", section).group(1)
    width, rest = re.match(r"COLUMNS=(\d+) param-compute run (.*)", command).groups()
    install, _ = _opening_commands()
    assert install.endswith("param-compute run " + rest), "the sample runs the demo"
    monkeypatch.setenv("COLUMNS", width)
    spec = REPO / shlex.split(rest)[1]
    done = run_cli("-c", spec, "-o", tmp_path / "sample.json", "-w", "0", "-i", "3")
    assert done.returncode == 0, done.stderr

    def header(text: str):
        line = next(line for line in text.splitlines() if "┃" in line)
        return [cell.strip() for cell in line.strip().strip("┃").split("┃")]

    sample = [line[4:] for line in section.strip("\n").split("\n\n")[0].splitlines()]
    assert header("\n".join(sample)) == header(done.stdout)
    assert max(len(line) for line in sample) <= int(width)
    assert not any(line.startswith("results:") for line in sample), \
        "the sample shows standard output only (the results path goes to standard error)"


def test_the_suite_time_it_states_is_the_one_the_bench_script_checks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_time", REPO / "bench" / "suite_time.py")
    suite_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite_time)
    seconds, cores = suite_time.readme_claim(_text())
    assert cores == "two" and 30 <= seconds <= 600
    assert suite_time.pytest_seconds("1 failed, 700 passed in 118.52s (0:01:58)") == 118.52
    with pytest.raises(ValueError):
        suite_time.readme_claim("no claim here")


def test_requirements_say_which_torch_build_the_pin_gives():
    text = (REPO / "requirements.txt").read_text()
    assert "CPU build of torch" not in text
    assert "default index gives the CUDA build" in text and "whl/cpu" in text
    table = _text().split("## Contents", 1)[0]
    assert "whl/cpu" in table and "CUDA build of torch 2.13.0" in table


def test_the_commands_table_lists_every_command_with_its_door():
    from param_compute.cli.main import COMMANDS

    rows = re.findall(r"^\| `param-compute (\w+)` \| [^|]+ \| `python -m ([\w.]+)` \|$",
                      _section("Commands"), re.M)
    assert rows == [(c.name, c.door) for c in COMMANDS]
