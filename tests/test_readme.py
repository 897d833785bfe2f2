"""The README stays true: its contents list every section (links that resolve), every repository
path it names exists, every ``python -m param_compute.X`` it shows is a module that starts, and it
opens with the two commands (install and demo, the tests) that ``.ci/run`` also runs."""

from __future__ import annotations

import importlib.util
import re
import shlex

import pytest

from conftest import REPO

README = REPO / "README.md"

#: Repository folders whose paths the README may name.
TOP = ("param_compute/", "examples/", "bench/", "tests/", "workloads/", ".ci/")


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _prose_and_code() -> str:
    return _text()


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _headings(level: str):
    return [line[len(level) + 1:] for line in _text().splitlines()
            if line.startswith(level + " ")]


def test_contents_lists_every_section_in_order_with_working_links():
    text = _text()
    assert "## Contents" in text
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", contents)
    sections = [h for h in _headings("##") if h != "Contents"]
    top_links = [title for title, _ in links if title in sections]
    assert top_links == sections, "the contents must list every ## section, in order"
    anchors = {_anchor(h) for h in _headings("##") + _headings("###")}
    for title, anchor in links:
        assert anchor in anchors, f"contents link {title!r} -> #{anchor} goes nowhere"


def test_every_internal_link_resolves():
    anchors = {_anchor(h) for level in ("##", "###", "####") for h in _headings(level)}
    for title, anchor in re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", _text()):
        assert anchor in anchors, f"link {title!r} -> #{anchor} goes nowhere"


def test_every_repository_path_named_exists():
    named = set()
    for token in re.findall(r"`([^`\s]+)`", _text()):
        path = token.rstrip(".,:;)")
        if path.startswith(TOP) and "*" not in path and "<" not in path and "X" != path[-1]:
            named.add(path.split("::")[0].split("#")[0])
    assert named, "the README names repository paths"
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"the README names paths that do not exist: {missing}"


def test_every_module_the_readme_runs_exists():
    modules = set(re.findall(r"python -m (param_compute(?:\.\w+)+)", _text()))
    assert "param_compute.run_benchmark" in modules
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert not missing, f"the README runs modules that do not exist: {missing}"


def test_the_readme_opens_with_the_install_and_test_commands_ci_runs():
    blocks = re.findall(r"\n    (\S[^\n]*)", _text().split("\n---", 1)[0])
    install, tests = blocks[0], blocks[1]
    assert install.startswith("pip install -r requirements.txt && pip install -e . && "
                              "python -m param_compute.run_benchmark -c examples/configs/")
    demo = shlex.split(install.split("&& ", 2)[2])
    assert (REPO / demo[demo.index("-c") + 1]).is_file()
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install -r requirements.txt && pip install -e ." in ci
    assert tests in ci, "CI runs the README's test command"


@pytest.mark.parametrize("claim", [r"about a minute", r"\bthe CPU build; an unpinned"])
def test_no_stale_claims(claim):
    assert not re.search(claim, _text()), f"stale claim still in the README: {claim}"


def _walkthrough_spec() -> dict:
    import json

    section = _text().split("## Five minutes: your first spec", 1)[1].split("\n## ", 1)[0]
    return json.loads(section.split("```json", 1)[1].split("```", 1)[0])


def test_the_five_minute_walkthrough_does_what_it_says(tmp_path):
    import json

    from conftest import run_cli

    spec = _walkthrough_spec()
    first = tmp_path / "first.json"
    first.write_text(json.dumps(spec))
    planned = run_cli("-c", first, "--dry-run", "--output", tmp_path / "plan.json")
    assert planned.returncode == 0, planned.stderr
    assert "256×512·512×128 f32" in planned.stdout
    assert "1024×1024·1024×1024 bf16" in planned.stdout
    done = run_cli("-c", first, "-b", "-i", "2", "--output", tmp_path / "first_results.json")
    assert done.returncode == 0, done.stderr
    report = run_cli(tmp_path / "first_results.json", "-o", tmp_path / "first.html",
                     module="param_compute.report")
    assert report.returncode == 0 and (tmp_path / "first.html").is_file(), report.stderr
    compared = run_cli(tmp_path / "first_results.json", tmp_path / "first_results.json",
                       module="param_compute.compare")
    assert compared.returncode == 0, compared.stderr
    op = spec["torch.mm"]  # step 3: the sweep, explained
    op["input_iterator"] = "RangeConfigIterator"
    op["config"][0]["input"][0]["args"][0].update(shape=[[256, 1024, 256], 512],
                                                  __range__=["shape"])
    first.write_text(json.dumps(spec))
    explained = run_cli("-c", first, "--explain")
    assert explained.returncode == 0, explained.stderr
    assert "args[0].shape[0]: 256, 512, 768, 1024" in explained.stdout


def test_every_repository_path_in_the_prose_exists():
    """Paths named anywhere (not only in code spans), except those inside another project's
    path (``train/compute/python/examples/...`` is PARAM's)."""
    top = "|".join(re.escape(t.rstrip("/")) for t in TOP)
    named = set(re.findall(rf"(?<![\w/.-])((?:{top})/[\w./-]*\w)", _text()))
    assert "param_compute/spec/spec.schema.json" in named
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"the README names paths that do not exist: {missing}"


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


def test_help_and_readme_describe_the_timing_modes_alike():
    from param_compute.cli.run_benchmark import build_parser

    [action] = [a for a in build_parser()._actions if "--exec-mode" in a.option_strings]
    row = next(line for line in _text().splitlines() if line.startswith("| `--exec-mode` |"))
    readme = row.split("|")[2].replace("`", "").strip()
    assert " ".join(action.help.split()) == readme
    assert "10 blocks" in readme  # continuous mode: stamped blocks, not "timed as a whole"


def test_requirements_say_which_torch_build_the_pin_gives():
    text = (REPO / "requirements.txt").read_text()
    assert "CPU build of torch" not in text
    assert "default index gives the CUDA build" in text and "whl/cpu" in text
