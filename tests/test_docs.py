"""The documentation stays true: README.md and every docs/ page name only paths, flags, doors and
commands that exist, their links and anchors resolve, each page opens with a summary and a
contents list, and docs/command-line.md is what ``param_compute.cli.reference`` renders."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from conftest import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
ALL = [README, *PAGES]

#: Repository folders whose paths the documentation may name.
TOP = ("param_compute/", "examples/", "bench/", "tests/", "workloads/", ".ci/", "docs/")

#: Flags the docs name that belong to other programs, each with why it is shown. A flag with a
#: file must also appear in that file (a bench script's own flag).
OTHER_PROGRAMS: Dict[str, Tuple[str, str]] = {
    "--extra-index-url": ("pip's: the CPU-only torch build in the install table", ""),
    "--find-links": ("pip's: a local torch wheel in the install table", ""),
    "--nproc-per-node": ("torchrun's: the sharded run's example", ""),
    "--nproc_per_node": ("torchrun's: a job replayed on its ranks", ""),
    "--nnodes": ("torchrun's: a job across nodes", ""),
    "--node_rank": ("torchrun's: a job across nodes", ""),
    "--master_addr": ("torchrun's: a job across nodes (its rendezvous)", ""),
    "--master_port": ("torchrun's: a job across nodes (its rendezvous)", ""),
    "--rdzv-backend": ("torchrun's: a job across nodes (its rendezvous)", ""),
    "--rdzv-endpoint": ("torchrun's: a job across nodes (its rendezvous)", ""),
    "--log-file": ("Nsight Compute's: the command a profiled batch runs", ""),
    "--target-processes": ("Nsight Compute's: the command a profiled batch runs", ""),
    "--nvtx": ("Nsight Compute's: the command a profiled batch runs", ""),
    "--nvtx-include": ("Nsight Compute's: the iteration-range filter of a batch", ""),
    "--metrics": ("Nsight Compute's: raw metrics given in --ncu-args-file", ""),
    "--set": ("Nsight Compute's: a section set given in --ncu-args-file", ""),
    "--page": ("Nsight Compute's: the raw page the report also reads", ""),
    "--type": ("nsys export's: the SQLite export nsys_report reads", ""),
    "--distribution": ("a bench script's flag", "bench/dlrm_coverage.py"),
    "--traces": ("a bench script's flag", "bench/capture_fidelity.py"),
    "--malloc": ("a bench script's flag", "bench/replay_models.py"),
    "--as-user": ("a bench script's flag", "bench/fidelity.py"),
}


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _shown(path: Path) -> str:
    """A page's text without HTML comments (the generated page's note to editors)."""
    return re.sub(r"<!--.*?-->", "", _text(path), flags=re.S)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, each
    space a dash."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path: Path) -> List[Tuple[int, str]]:
    """(level, text) of every heading outside fenced code blocks."""
    found, fenced = [], False
    for line in _text(path).splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            level = len(line) - len(line.lstrip("#"))
            found.append((level, line[level + 1:]))
    return found


def anchors(path: Path) -> Set[str]:
    return {anchor(text) for _, text in headings(path)}


def _links(path: Path) -> List[Tuple[str, str]]:
    """(title, target) of every markdown link outside code."""
    text = re.sub(r"```.*?```", "", _shown(path), flags=re.S)
    return re.findall(r"\[([^\]]+)\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", ALL, ids=lambda p: p.name)
def test_every_link_and_anchor_resolves(page):
    for title, target in _links(page):
        if re.match(r"[a-z]+:", target):  # https://...: another site
            continue
        where, _, fragment = target.partition("#")
        goal = (page.parent / where).resolve() if where else page
        assert goal.is_file(), f"{page.name}: link {title!r} -> {target}: no such file"
        if fragment:
            assert fragment in anchors(goal), \
                f"{page.name}: link {title!r} -> {target}: no heading with that anchor"


def test_readme_maps_every_docs_page_and_every_page_is_linked():
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in _links(README)
              if t.startswith("docs/")}
    assert PAGES, "docs/ holds the reference"
    missing = [p.name for p in PAGES if p.resolve() not in linked]
    assert not missing, f"README's map leaves out docs pages: {missing}"
    assert len(_text(README).splitlines()) <= 300, "the README is read in ten minutes: " \
        "300 lines at most; move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_opens_with_a_summary_and_contents_of_every_section(page):
    blocks = [b.strip() for b in _shown(page).split("\n\n") if b.strip()]
    assert blocks[0].startswith("# ") and "\n" not in blocks[0], f"{page.name}: a title first"
    summary = blocks[1]
    assert not summary.startswith(("#", "-", "|", "```", "    ")) and len(summary) > 200, \
        f"{page.name}: a paragraph summarizing the page follows its title"
    sections = [text for level, text in headings(page) if level == 2 and text != "Contents"]
    first_section = _text(page).index("\n## " + sections[0])
    contents = re.findall(r"^\s*- \[[^\]]+\]\(#([^)]+)\)", _text(page)[:first_section], re.M)
    listed = [a for a in contents if a in {anchor(s) for s in sections}]
    assert listed == [anchor(s) for s in sections], \
        f"{page.name}: the contents list every ## section, in order"


def _named_paths(text: str) -> Set[str]:
    """Repository paths named in code spans and in prose (not inside another project's path,
    such as PARAM's ``train/compute/python/examples/...``)."""
    named = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        path = token.rstrip(".,:;)")
        if path.startswith(TOP) and not re.search(r"[*<>]|[A-Z]{2,}", path):
            named.add(path.split("::")[0].split("#")[0])
    top = "|".join(re.escape(t.rstrip("/")) for t in TOP)
    for path in re.findall(rf"(?<![\w/.-])((?:{top})/[\w./-]*\w)", text):
        if not re.search(r"[A-Z]{2,}", path):
            named.add(path)
    return named


def test_every_repository_path_named_exists():
    named = {page.name: _named_paths(_text(page)) for page in ALL}
    assert "param_compute/spec/spec.schema.json" in named["spec-format.md"]
    missing = sorted(f"{page}: {path}" for page, paths in named.items() for path in paths
                     if not (REPO / path).exists())
    assert not missing, f"the docs name paths that do not exist: {missing}"


def test_every_flag_named_is_a_flag_of_some_command():
    from param_compute.cli.reference import option_strings

    known = option_strings()
    unknown = sorted({f"{page.name}: {flag}" for page in ALL
                      for flag in re.findall(r"(?<![\w-])--[a-zA-Z][\w-]*", _shown(page))
                      if flag not in known and flag not in OTHER_PROGRAMS})
    assert not unknown, "flags no command has (a renamed flag? another program's: add it to " \
                        f"OTHER_PROGRAMS with why): {unknown}"
    for flag, (why, home) in OTHER_PROGRAMS.items():
        assert flag not in known, f"{flag} is ours now: drop it from OTHER_PROGRAMS"
        assert why
        if home:
            assert flag in _text(REPO / home), f"{flag}: not a flag of {home}"


def _runnable(module: str) -> bool:
    """Whether ``python -m MODULE`` runs something: a module with a ``__main__`` block, or a
    package with a ``__main__`` module."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return False
    if spec.submodule_search_locations:
        return importlib.util.find_spec(module + ".__main__") is not None
    return "__name__ == \"__main__\"" in Path(spec.origin).read_text(encoding="utf-8")


def test_every_python_m_door_shown_runs():
    from param_compute.cli.main import COMMANDS

    shown = {module for page in ALL
             for module in re.findall(r"-m\s+(param_compute(?:\.\w+)*)", _shown(page))
             if not module.rpartition(".")[2].isupper()}  # param_compute.X: a placeholder
    doors = {command.door for command in COMMANDS}
    assert doors <= shown, f"doors the docs never show: {sorted(doors - shown)}"
    broken = sorted(m for m in shown if not _runnable(m))
    assert not broken, f"the docs run modules that python -m cannot run: {broken}"


def test_every_param_compute_command_shown_exists():
    from param_compute.cli.main import BY_NAME
    from param_compute.cli.reference import parser_of

    subcommands: Dict[str, Set[str]] = {}
    for name, command in BY_NAME.items():
        parser = parser_of(command.module, f"param-compute {name}")
        subcommands[name] = {choice for action in parser._actions
                             for choice in getattr(action, "choices", None) or ()
                             if action.__class__.__name__ == "_SubParsersAction"}
    shown = [(page.name, words) for page in ALL
             for words in re.findall(r"param-compute ([a-z][\w-]*)(?: ([a-z][\w-]*))?",
                                     _shown(page))]
    assert {words[0] for _, words in shown} >= set(BY_NAME), "every command is shown somewhere"
    wrong = sorted(f"{page}: param-compute {' '.join(words).strip()}" for page, words in shown
                   if words[0] != "help" and (words[0] not in BY_NAME or (
                       subcommands[words[0]] and words[1]
                       and words[1] not in subcommands[words[0]])))
    assert not wrong, f"commands that do not exist: {wrong}"


def test_the_architecture_table_names_real_modules_and_every_package():
    text = _text(DOCS / "architecture.md")
    rows = re.findall(r"^\| `(param_compute/[\w/]+/)` \|[^|]*\| (.*) \|$", text, re.M)
    assert len(rows) >= 10
    missing = []
    for package, modules in rows:
        base = REPO / package
        for sub, inner in re.findall(r"`(\w+)/` \(([^)]*)\)", modules):
            missing += [f"{package}{sub}/{name}" for name in re.findall(r"`(\w+)`", inner)
                        if not (base / sub / f"{name}.py").is_file()]
        outside = modules
        while re.search(r"\([^()]*\)", outside):
            outside = re.sub(r"\([^()]*\)", "", outside)
        for name in re.findall(r"`(\w+)/?`", outside):
            if not ((base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file()):
                missing.append(f"{package}{name}")
    assert not missing, f"architecture.md names modules that do not exist: {missing}"
    packages = {str(p.parent.relative_to(REPO)) + "/" for p in (REPO / "param_compute").rglob(
        "__init__.py") if p.parent != REPO / "param_compute"}
    unnamed = sorted(p for p in packages if f"`{p}`" not in text and not any(
        f"`{Path(p).name}/`" in row for _, row in rows))
    assert not unnamed, f"packages architecture.md never names: {unnamed}"


def test_the_command_line_reference_is_current():
    from param_compute.cli.reference import REGENERATE, render

    assert _text(DOCS / "command-line.md") == render(), \
        f"docs/command-line.md is stale (a flag or its help changed): regenerate it with\n" \
        f"    {REGENERATE}"


def test_the_reference_says_nothing_of_the_machine_it_was_made_on():
    """Generated anywhere, the page is the same: no interpreter, checkout or home path in a
    default (ab's --python-a once showed the generating virtualenv's python)."""
    import os
    import sys

    from param_compute.cli.reference import render

    text = render()
    for local in (sys.executable, sys.prefix, str(REPO), os.path.expanduser("~")):
        assert local not in text, local


def test_the_reference_covers_every_command_and_flag():
    from param_compute.cli.main import COMMANDS
    from param_compute.cli.reference import all_parsers, render

    text = render()
    for command in COMMANDS:
        assert f"## `param-compute {command.name}`" in text
        assert f"python -m {command.door}" in text
    for parser in all_parsers():
        for action in parser._actions:
            for flag in action.option_strings:
                assert f"`{flag}`" in text, f"{parser.prog}: {flag} missing"
    # run's -o differs by door, and the page says so
    assert "| `output_prefix` | `--output-prefix` | `-o`, `--output-prefix` |" in text


def test_the_reference_does_not_depend_on_the_terminal(monkeypatch):
    from param_compute.cli.reference import render

    monkeypatch.setenv("COLUMNS", "40")
    narrow = render()
    monkeypatch.setenv("COLUMNS", "300")
    assert render() == narrow


def test_the_reference_takes_a_parser_built_inside_main(tmp_path, monkeypatch):
    """A command module without ``build_parser`` still gives its parser, and nothing of its
    ``main`` runs past parsing."""
    import argparse

    from param_compute.cli.reference import parser_of

    original = argparse.ArgumentParser.parse_args
    module = tmp_path / "doc_probe_tool.py"
    module.write_text(
        "import argparse\n"
        "RAN = []\n"
        "def main(argv=None, prog='probe'):\n"
        "    parser = argparse.ArgumentParser(prog=prog, description='a probe')\n"
        "    parser.add_argument('--probe-flag', default=3, help='what it does')\n"
        "    parser.parse_args(argv)\n"
        "    RAN.append(True)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    parser = parser_of("doc_probe_tool", "param-compute probe")
    assert parser.prog == "param-compute probe"
    assert [a.option_strings for a in parser._actions][-1] == ["--probe-flag"]
    import doc_probe_tool

    assert doc_probe_tool.RAN == []
    assert argparse.ArgumentParser.parse_args is original  # parsing restored
