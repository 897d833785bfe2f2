"""The offline tools' own outputs (compare --csv/--html, report -o/--png-dir, the history
dashboard, nsys/ncu report --csv) are checked as a run's outputs are: a planted symbolic link
is refused (exit 2) and the file it points to is left as it was; an input is never overwritten."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from test_history import header, history, record, write_results

HOSTILE = Path(__file__).parent / "hostile_results"
BASE = HOSTILE / "base.json"
VICTIM_TEXT = "precious\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


def _planted(tmp_path, victim, name):
    link = tmp_path / name
    os.symlink(victim, link)
    return link


@pytest.mark.parametrize("flag", ["--html", "--csv"])
def test_compare_refuses_an_output_through_a_planted_link(tmp_path, victim, flag):
    link = _planted(tmp_path, victim, "out" + (".html" if flag == "--html" else ".csv"))
    result = run_cli(BASE, BASE, flag, link, module="param_compute.analysis.compare")
    assert result.returncode == 2
    assert f"{flag} {link}: is a symbolic link" in result.stderr
    assert victim.read_text() == VICTIM_TEXT and os.path.islink(link)


def test_compare_never_writes_over_an_input(tmp_path):
    base = tmp_path / "base.json"
    base.write_bytes(BASE.read_bytes())
    result = run_cli(base, base, "--html", base, module="param_compute.analysis.compare")
    assert result.returncode == 2
    assert "is the BASE file: writing it would destroy the input" in result.stderr
    assert base.read_bytes() == BASE.read_bytes()


def test_compare_html_is_written_and_replaced_whole(tmp_path):
    out = tmp_path / "cmp.html"
    out.write_text("old")
    result = run_cli(BASE, BASE, "--html", out, module="param_compute.analysis.compare")
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("<!DOCTYPE html>") and not os.path.islink(out)
    assert [p.name for p in tmp_path.iterdir()] == ["cmp.html"]  # no temporary file left


def test_report_refuses_a_planted_output_link_before_reading(tmp_path, victim):
    link = _planted(tmp_path, victim, "report.html")
    result = run_cli(BASE, "-o", link, module="param_compute.analysis.report")
    assert result.returncode == 2
    assert f"-o/--output {link}: is a symbolic link" in result.stderr
    assert victim.read_text() == VICTIM_TEXT


def test_history_report_never_writes_through_a_planted_index(tmp_path, victim):
    db = tmp_path / "h.db"
    done = history("add", write_results(tmp_path / "r.json", header(), [record(0, 1.0)]),
                   "--label", "c1", db=db)
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site"
    site.mkdir()
    _planted(site, victim, "index.html")
    result = history("report", "-o", site, db=db)
    assert result.returncode == 2
    assert "index.html" in result.stderr and "is a symbolic link" in result.stderr
    assert victim.read_text() == VICTIM_TEXT


def test_ab_refuses_a_planted_link_before_any_process_runs(tmp_path, victim):
    out = tmp_path / "ab"
    out.mkdir()
    _planted(out, victim, "b.json")
    result = run_cli("-c", Path(__file__).parents[1] / "examples" / "configs" / "simple_add.json",
                     "--a", "-i 3", "--b", "-i 3", "--rounds", "1", "-o", out,
                     module="param_compute.cli.ab")
    assert result.returncode == 2
    assert f"side B's results {out / 'b.json'}: is a symbolic link" in result.stderr
    assert "round 1" not in result.stderr  # nothing ran
    assert victim.read_text() == VICTIM_TEXT


def test_history_report_names_a_file_given_as_its_folder(tmp_path, victim):
    db = tmp_path / "h.db"
    done = history("add", write_results(tmp_path / "r.json", header(), [record(0, 1.0)]),
                   "--label", "c1", db=db)
    assert done.returncode == 0, done.stderr
    result = history("report", "-o", victim, db=db)
    assert result.returncode == 2
    assert f"-o {victim}: not a directory" in result.stderr
    assert victim.read_text() == VICTIM_TEXT
