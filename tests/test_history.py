"""The results history: ingest (idempotent, damaged lines, kills), machines, steps, the gate."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

import param_compute
from conftest import REPO, run_cli
from param_compute.history.backends import HistoryError
from param_compute.history.select import keyword_matcher
from param_compute.history.series import Point
from param_compute.history.show import sparkline
from param_compute.history.steps import detect
from param_compute.history.store import HistoryStore

HISTORY = "param_compute.cli.history"


def history(*args, db=None, **kwargs):
    argv = [str(a) for a in args] + (["--db", str(db)] if db is not None else [])
    return run_cli(*argv, module=HISTORY, **kwargs)


def header(host="h1", torch="2.13.0", start="2026-01-01T00:00:00", **info):
    return {"run_options": {"device": "cpu", "num_threads": 1, "config_file": "/x/spec.json"},
            "sys_info": {"hostname": host, "device": "cpu", "machine": "x86_64",
                         "pytorch_version": torch, "pytorch_num_threads": 1, **info},
            "start_time": start}


def record(i, median, op="torch.mm", width=0.01, count=None, **extra):
    out = {"op_name": op, "id": f"{i}|0|0", "status": "ok",
           "stats": {"forward": {"n": 20, "median": median, "ci_low": median * (1 - width),
                                 "ci_high": median * (1 + width)}},
           "config": {"build": None, "input": {"args": [
               {"type": "tensor", "dtype": "float", "shape": [64 + i, 64]}]}}, **extra}
    if count is not None:
        out["count"] = count
    return out


def write_results(path, head, records, extra_lines=()):
    lines = [json.dumps(head)] + [json.dumps(r) for r in records] + list(extra_lines)
    lines.append(json.dumps({"finish_time": "2026-01-01T00:01:00"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def counts(db):
    with HistoryStore.open(str(db)) as store:
        return store.counts()


# --- the store ------------------------------------------------------------------------------

def test_add_twice_adds_nothing_and_labels_default_to_the_torch_build(tmp_path):
    db = tmp_path / "h.db"
    results = write_results(tmp_path / "r.json", header(pytorch_git_version="abcdef1234567"),
                            [record(i, 1.0 + i) for i in range(3)])
    first = history("add", results, db=db)
    assert first.returncode == 0, first.stderr
    assert "added as torch-2.13.0-abcdef1234 on h1 cpu/x86_64 1t torch 2.13.0: 3 point(s) " \
           "from 3 record(s)" in first.stdout
    before = counts(db)
    assert before == {"machines": 1, "labels": 1, "runs": 1, "series": 3, "points": 3}
    again = history("add", results, "--label", "other", db=db)
    assert again.returncode == 0
    assert "already in the history (label torch-2.13.0-abcdef1234" in again.stdout
    assert "nothing added" in again.stdout
    assert counts(db) == before  # not even the label 'other'
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_header_without_commit_or_torch_needs_a_label(tmp_path):
    head = header()
    del head["sys_info"]["pytorch_version"]
    results = write_results(tmp_path / "r.json", head, [record(0, 1.0)])
    done = history("add", results, db=tmp_path / "h.db")
    assert done.returncode == 2
    assert "names no git commit or torch version; give the run a label (--label L)" in done.stderr
    assert history("add", results, "--label", "v1", db=tmp_path / "h.db").returncode == 0
    head["sys_info"]["git_commit"] = "0123456789abcdef"
    other = write_results(tmp_path / "g.json", head, [record(0, 1.0)])
    assert "added as 0123456789ab " in history("add", other, db=tmp_path / "h.db").stdout


def test_damaged_lines_are_skipped_and_listed_the_rest_is_added(tmp_path):
    wrong = record(2, 1.0)
    wrong["stats"]["forward"]["median"] = "fast"
    path = write_results(tmp_path / "r.json", header(), [record(0, 1.0), record(1, 2.0)],
                         extra_lines=["{not json", json.dumps(wrong)])
    done = history("add", path, "--label", "v1", db=tmp_path / "h.db")
    assert done.returncode == 0, done.stderr
    assert f"warning: {path}:4: not JSON" in done.stderr
    assert f"warning: {path}:5: run record's stats.forward.median is not a number" in done.stderr
    assert "2 point(s) from 2 record(s); 2 damaged line(s) skipped (listed above)" in done.stdout
    assert counts(tmp_path / "h.db")["points"] == 2


@pytest.mark.parametrize("content, message", [
    (b"not a database at all, just text" * 40, "not a history database (not an SQLite "
                                                "database: its first bytes are not SQLite's "
                                                "header)"),
    (b"SQLite format 3\x00" + b"\x00" * 4080, "not a history database (SQLite says: file is "
                                             "not a database)"),
    (None, "is a directory, not a history database"),
])
def test_a_file_that_is_no_history_database_is_named(tmp_path, content, message):
    db = tmp_path / "h.db"
    if content is None:
        db.mkdir()
    else:
        db.write_bytes(content)
    for args in (("show",), ("add", write_results(tmp_path / "r.json", header(),
                                                  [record(0, 1.0)]))):
        done = history(*args, db=db)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    if content is not None:
        assert db.read_bytes() == content  # never written into


def test_another_sqlite_database_or_a_newer_schema_is_refused(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE accounts (id INTEGER)")
    done = history("show", db=other)
    assert done.returncode == 2
    assert "not a param_compute history database (it has tables, but no history_meta: " \
           "accounts)" in done.stderr
    impostor = tmp_path / "impostor.db"
    with sqlite3.connect(impostor) as connection:
        connection.execute("CREATE TABLE history_meta (k TEXT, v TEXT)")
    for command in ("show", "add"):
        args = (command,) if command == "show" else (
            command, write_results(tmp_path / "i.json", header(), [record(0, 1.0)]), "--label", "v")
        done = history(*args, db=impostor)
        assert (done.returncode, done.stderr) == (2, f"error: {impostor}: not a param_compute "
                                                     "history database (history_meta "
                                                     "unreadable: no such column: key)\n")
    missing = history("check", db=tmp_path / "none.db")
    assert missing.returncode == 2 and "no history database here" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    db = tmp_path / "h.db"
    history("add", write_results(tmp_path / "r.json", header(), [record(0, 1.0)]), db=db)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE history_meta SET value = '99' WHERE key = 'schema_version'")
    newer = history("show", db=db)
    assert newer.returncode == 2 and "written by a newer param_compute (schema 99" in newer.stderr


KILLED_ADD = """
import sys
from param_compute.cli.history import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_add_leaves_the_store_as_it_was_and_adding_again_completes(tmp_path):
    db = tmp_path / "h.db"
    small = write_results(tmp_path / "small.json", header(), [record(0, 1.0)])
    assert history("add", small, "--label", "v0", db=db).returncode == 0
    big = write_results(tmp_path / "big.json", header(host="h2"),
                        [record(i, 1.0 + i / 1e5) for i in range(80_000)])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", KILLED_ADD, "add", str(big), "--label",
                                "v1", "--db", str(db)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    wal = tmp_path / "h.db-wal"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if wal.exists() and wal.stat().st_size > 2 << 20:  # mid-transaction pages written
            break
        time.sleep(0.01)
    assert process.poll() is None, "the add ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert counts(db) == {"machines": 1, "labels": 1, "runs": 1, "series": 1, "points": 1}
    done = history("add", big, "--label", "v1", db=db)
    assert done.returncode == 0, done.stderr
    assert counts(db) == {"machines": 2, "labels": 2, "runs": 2, "series": 80_001,
                          "points": 80_001}


# --- series, machines, steps ---------------------------------------------------------------

def test_machines_are_never_mixed_unless_asked(tmp_path):
    db = tmp_path / "h.db"
    for label, host, median in (("v1", "a", 1.0), ("v2", "b", 2.0)):
        history("add", write_results(tmp_path / f"{label}.json", header(host=host),
                                     [record(0, median)]), "--label", label, db=db)
    apart = history("show", db=db)
    assert apart.stdout.count("torch.mm|0|0|0") == 2
    assert "on a cpu/x86_64 1t torch 2.13.0" in apart.stdout
    assert "on b cpu/x86_64 1t torch 2.13.0" in apart.stdout
    together = history("show", "--mix-machines", db=db)
    assert together.stdout.count("torch.mm|0|0|0") == 1
    assert "▁█  v1 … v2 (2)" in together.stdout and "on all machines" in together.stdout
    only_b = history("show", "--machine", "b*", db=db)
    assert only_b.stdout.count("torch.mm|0|0|0") == 1 and "on b " in only_b.stdout


def points(medians, width=0.01):
    return [Point(f"c{i + 1}", m, m * (1 - width), m * (1 + width))
            for i, m in enumerate(medians)]


def test_steps_are_levels_not_outliers():
    [step] = detect(points([1, 1, 1, 1.2, 1.2, 1.2]))
    assert (step.label, round(step.change, 3), step.regression) == ("c4", 0.2, True)
    assert detect(points([1, 1, 1, 2, 1, 1])) == []  # one outlier
    assert detect(points([1, 1, 1, 1, 2])) == []  # one odd last label: not yet a level
    up, down = detect(points([1, 1.01, 0.99, 1, 1.3, 1.31, 1.29, 1.0, 1.0, 1.01]))
    assert (up.label, down.label) == ("c5", "c8") and down.change < 0
    # overlapping intervals: not significant, however the medians moved
    assert detect(points([1, 1, 1, 1.05, 1.05, 1.05], width=0.2)) == []


def test_run_to_run_scatter_is_no_step_but_a_real_shift_in_it_is():
    import random

    rng = random.Random(3)
    noise = [rng.gauss(1.0, 0.03) for _ in range(200)]
    assert detect(points(noise, width=0.005)) == []  # intervals tighter than the scatter
    shifted = noise[:100] + [v * 1.15 for v in noise[100:]]
    [step] = detect(points(shifted, width=0.005))
    assert step.label == "c101" and 0.1 < step.change < 0.2


def test_keyword_expressions_and_sparklines():
    match = keyword_matcher("mm and (forward or backward) and not bf16")
    assert match("torch.mm|0|0|0 (64×64 f32) [forward]")
    assert not match("torch.mm|0|0|0 (64×64 bf16) [forward]")
    assert not match("torch.add|0|0|0 [forward]")
    for bad, why in (("(mm or add", "never closed"), ("mm and", "ends too early"),
                     ("or x", "'or'")):
        with pytest.raises(HistoryError, match=why):
            keyword_matcher(bad)
    # without and/or/not, text that is no expression is one term (a label copied from a table)
    assert keyword_matcher("(64×64 f32")("torch.mm|0|0|0 (64×64 f32) [forward]")
    assert not keyword_matcher("(64×64 f32")("torch.mm|0|0|0 (64×64 bf16) [forward]")
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([2, 2]) == "▁▁"


def test_a_captured_workload_step_total_is_a_series(tmp_path):
    db = tmp_path / "h.db"
    step_line = json.dumps({"step_replay": {"stats": {"median": 5.0, "ci_low": 4.9,
                                                      "ci_high": 5.1, "n": 10}}})
    for label, scale in (("c1", 1.0), ("c2", 1.0), ("c3", 1.3), ("c4", 1.3)):
        records = [record(0, 1.0 * scale, count=3), record(1, 0.5, count=2)]
        history("add", write_results(tmp_path / f"{label}.json", header(start=label), records,
                                     [step_line]), "--label", label, db=db)
    shown = history("show", "--only", "workload step", db=db)
    assert "workload step (spec.json: Σ median × count) [isolated]" in shown.stdout
    assert "workload step (spec.json: in-step replay) [in-step]" in shown.stdout
    assert "last 4.900 ms" in shown.stdout  # 1.3 × 3 + 0.5 × 2
    checked = history("check", "--fail-on-regression", "10", "--only", "workload step", db=db)
    assert checked.returncode == 1
    [regression] = [line for line in checked.stdout.splitlines() if "regression:" in line]
    assert regression.startswith(
        "regression: workload step (spec.json: Σ median × count) [isolated] on h1 ")
    assert "+22.5% at c3 (4.000 ms → 4.900 ms)" in checked.stdout


# --- the gate: six runs, one config 50% slower from c4 on (a sleep: its overshoot on a loaded
# machine adds to both sides, so the step must stand well above the 10% gate) -----------------

NAP = textwrap.dedent("""
    import os
    import time
    from param_compute import OperatorInterface, register_operator

    class Nap(OperatorInterface):
        def forward(self, seconds, tag):
            slow = os.environ.get("HISTORY_TEST_SLOW_TAG")
            time.sleep(seconds * (1.5 if slow is not None and int(slow) == tag else 1.0))

    register_operator("test.nap", Nap)
""")


def nap_spec():
    configs = [{"input": [{"args": [{"type": "float", "value": 0.002},
                                    {"type": "int", "value": tag}]}]} for tag in (1, 2, 3)]
    return {"test.nap": {"input_data_generator": "PyTorch:DefaultDataGenerator",
                         "config": configs}}


def six_runs(tmp_path, monkeypatch, slow_from):
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "nap.py").write_text(NAP)
    db = tmp_path / f"history-{slow_from}.db"
    for index in range(1, 7):
        if slow_from and index >= slow_from:
            monkeypatch.setenv("HISTORY_TEST_SLOW_TAG", "2")
        else:
            monkeypatch.delenv("HISTORY_TEST_SLOW_TAG", raising=False)
        out = tmp_path / f"c{index}-{slow_from}.json"
        param_compute.run(nap_spec(), workloads_dirs=[plugins], output=out, warmup=1,
                          iteration=15, num_threads=1)
        assert history("add", out, "--label", f"c{index}", db=db).returncode == 0
    return db


def test_check_names_the_config_that_got_slower_and_the_label_where(tmp_path, monkeypatch):
    db = six_runs(tmp_path, monkeypatch, slow_from=4)
    done = history("check", "--fail-on-regression", "10", db=db)
    assert done.returncode == 1, done.stdout + done.stderr
    [regression] = [line for line in done.stdout.splitlines() if line.startswith("regression")]
    assert regression.startswith("regression: test.nap|1|0|0 (0.002·2) [forward] on ")
    assert "torch" in regression  # the machine
    assert " at c4 (" in regression
    assert "1 regression(s) of at least 10% in 3 series" in done.stdout
    later = history("check", "--fail-on-regression", "10", "--since", "c5", db=db)
    assert later.returncode == 0 and "0 regression(s) of at least 10% since c5" in later.stdout
    steady = six_runs(tmp_path, monkeypatch, slow_from=0)
    calm = history("check", "--fail-on-regression", "10", db=steady)
    assert calm.returncode == 0, calm.stdout
    assert "0 regression(s) of at least 10% in 3 series" in calm.stdout


def test_concurrent_writers_queue_and_both_land(tmp_path):
    db = tmp_path / "h.db"
    files = [write_results(tmp_path / f"r{i}.json", header(host=f"h{i}"),
                           [record(j, 1.0 + j) for j in range(3000)]) for i in range(3)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writers = [subprocess.Popen([sys.executable, "-c", KILLED_ADD, "add", str(path), "--label",
                                 f"v{i}", "--db", str(db)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for i, path in enumerate(files)]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        assert "added as v" in out
    assert counts(db) == {"machines": 3, "labels": 3, "runs": 3, "series": 9000,
                          "points": 9000}


def test_damaged_rows_of_a_database_are_left_out_not_a_crash(tmp_path):
    db = tmp_path / "h.db"
    for label, median in (("v1", 1.0), ("v2", 1.0)):
        history("add", write_results(tmp_path / f"{label}.json", header(start=label),
                                     [record(0, median), record(1, 2.0)]), "--label", label,
                db=db)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE points SET median = 'fast' WHERE series_id = 1 AND "
                           "label_id = 2")
        connection.execute("UPDATE points SET ci_low = 'x', n = 'y' WHERE series_id = 2")
    shown = history("show", db=db)
    assert shown.returncode == 0, shown.stderr
    assert "torch.mm|0|0|0 (64×64 f32) [forward] on h1" in shown.stdout
    assert "  ▁  v1 (1)  last 1.000 ms" in shown.stdout  # the damaged point left out
    assert "▁▁  v1 … v2 (2)  last 2.000 ms" in shown.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    db = tmp_path / "h.db"
    missing = history("add", tmp_path / "nothere.json", "--label", "v1", db=db)
    assert missing.returncode == 2 and "nothere.json: no such file" in missing.stderr
    os.mkfifo(tmp_path / "fifo.json")
    fifo = history("add", tmp_path / "fifo.json", "--label", "v1", db=db)
    assert fifo.returncode == 2 and "is a FIFO, not a regular file" in fifo.stderr
    history("add", write_results(tmp_path / "r.json", header(), [record(0, 1.0)]), "--label",
            "v1", db=db)
    since = history("check", "--since", "v9", db=db)
    assert since.returncode == 2 and "--since 'v9': no such label (latest: v1)" in since.stderr
    spaced = history("add", write_results(tmp_path / "t.json", header(start="t"),
                                          [record(0, 1.0)]), "--label", " v2 ", db=db)
    assert "added as v2 on" in spaced.stdout  # kept without its spaces, and found so
    assert history("check", "--since", " v2 ", db=db).returncode == 0
    keyword = history("show", "-k", "mm and", db=db)
    assert keyword.returncode == 2 and "-k 'mm and': ends too early" in keyword.stderr
    label = history("add", write_results(tmp_path / "s.json", header(start="s"),
                                         [record(0, 1.0)]), "--label", "a\tb", db=db)
    assert label.returncode == 2 and "at most 200 printable characters" in label.stderr
    for done in (missing, fifo, since, keyword, label):
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_numbers_out_of_the_store_s_range_are_not_a_crash(tmp_path):
    head = header()
    head["sys_info"]["pytorch_num_threads"] = 2**70
    odd = record(0, 1e15)  # the largest time taken from a file (results.fields.MAX_NUMBER)
    odd["stats"]["forward"]["n"] = 2**62
    odd["op_name"] = "op\nwith\ttabs \x1b[2J <and> ünïcode"
    path = write_results(tmp_path / "r.json", head, [odd, record(1, 2**62), record(2, 1e300)])
    done = history("add", path, "--label", "v1", db=tmp_path / "h.db")
    assert done.returncode == 0, done.stderr
    # no thread count; 2**62 and 1e300 ms are no measurements (as every tool reads them)
    assert "on h1 cpu/x86_64 torch 2.13.0: 1 point(s) from 3 record(s), 2 without a " \
           "measured pass" in done.stdout
    shown = history("show", db=tmp_path / "h.db")
    # control characters from the data are printed as escapes, never sent to the terminal
    assert shown.returncode == 0
    assert "op\\nwith\\ttabs \\x1b[2J <and> ünïcode|0|0|0" in shown.stdout


def test_add_never_writes_through_a_symbolic_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim\n")
    results = write_results(tmp_path / "r.json", header(), [record(0, 1.0)])
    for target in (victim, tmp_path / "nowhere.db"):  # a planted link, and a dangling one
        link = tmp_path / "link.db"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
        done = history("add", results, "--label", "v1", db=link)
        assert done.returncode == 2
        assert done.stderr == (f"error: {link}: is a symbolic link; give the database's own "
                               "path (add never writes through a link)\n")
    assert victim.read_text() == "victim\n"
    assert not (tmp_path / "nowhere.db").exists()


def test_a_median_that_is_no_positive_time_is_no_point(tmp_path):
    db = tmp_path / "h.db"
    good = write_results(tmp_path / "good.json", header(), [record(0, 1.0)])
    assert history("add", good, "--label", "v1", db=db).returncode == 0
    for i, median in enumerate((0.0, -1.0)):
        bad = write_results(tmp_path / f"bad{i}.json", header(start=f"s{i}"),
                            [record(0, median)])
        done = history("add", bad, "--label", f"v{i + 2}", db=db)
        assert done.returncode == 0, done.stderr
        assert "0 point(s) from 1 record(s), 1 without a measured pass" in done.stdout
    assert counts(db)["points"] == 1


def test_a_hostile_keyword_expression_is_a_message_not_a_recursion_error(tmp_path):
    db = tmp_path / "h.db"
    history("add", write_results(tmp_path / "r.json", header(), [record(0, 1.0)]), "--label",
            "v1", db=db)
    deep = "(" * 100 + "mm" + ")" * 100
    nots = "not " * 40 + "mm"
    long = " and ".join(["mm"] * 200)
    for expression, why in ((deep, "nested deeper than 32 ('(' and 'not')"),
                            (nots, "nested deeper than 32 ('(' and 'not')"),
                            (long, "more than 256 words, operators and parentheses")):
        done = history("show", "-k", expression, db=db)
        assert done.returncode == 2
        assert done.stderr == f"error: -k {expression[:57] + '...'!r}: {why}\n"
    empty = history("show", "-k", "", db=db)
    assert (empty.returncode, empty.stderr) == (2, "error: -k: an empty expression\n")
    assert keyword_matcher("(" * 30 + "mm" + ")" * 30)("torch.mm")
    assert keyword_matcher("not " * 31 + "mm")("torch.add")


def test_control_characters_from_a_header_or_a_label_never_reach_the_terminal(tmp_path):
    db = tmp_path / "h.db"
    results = write_results(tmp_path / "r.json", header(host="evil\x1b[2Jhost\x9b"),
                            [record(0, 1.0)])
    done = history("add", results, "--label", "v1", db=db)
    assert done.returncode == 0, done.stderr
    assert "added as v1 on evil\\x1b[2Jhost\\x9b cpu/x86_64 1t torch 2.13.0: 1 point(s)" \
        in done.stdout
    for label in ("a\x7fb", "a\u202eb", "a\x1bb"):
        refused = history("add", results, "--label", label, db=db)
        assert refused.returncode == 2
        assert refused.stderr == f"error: --label {label!r}: at most 200 printable characters\n"
    committed = write_results(tmp_path / "g.json", header(git_commit="ab\x1b[31mcd"),
                              [record(0, 1.0)])
    done = history("add", committed, db=db)
    assert done.returncode == 2
    assert done.stderr == (f"error: {committed}: the label its header gives ('ab\\x1b[31mcd') "
                           "is not printable; give the run a label (--label L)\n")


def test_the_gate_fails_closed_and_refuses_bounds_that_judge_nothing(tmp_path):
    db = tmp_path / "h.db"
    history("add", write_results(tmp_path / "r.json", header(), [record(0, 1.0)]), "--label",
            "v1", db=db)
    assert history("check", db=db).returncode == 0
    for args, message in (
            (("check", "-k", "no_such_op"), "error: nothing to judge: no series (nothing added "
                                            "yet, or nothing matches --only/-k/--machine)\n"),
            (("check", "--fail-on-regression", "inf"),
             "error: --fail-on-regression: a percentage above 0\n"),
            (("show", "--min-change", "nan"), "error: --min-change nan: a percentage >= 0\n"),
            (("check", "--min-change", "-5"), "error: --min-change -5: a percentage >= 0\n")):
        done = history(*args, db=db)
        assert (done.returncode, done.stderr, done.stdout) == (2, message, ""), args


def test_a_database_point_that_is_no_positive_time_is_left_out_when_read(tmp_path):
    db = tmp_path / "h.db"
    for i, median in enumerate((1.0, 1.0, 1.0, 2.0, 2.0, 2.0)):
        history("add", write_results(tmp_path / f"r{i}.json", header(start=f"s{i}"),
                                     [record(0, median)]), "--label", f"c{i}", db=db)
    with sqlite3.connect(db) as connection:  # a damaged or hostile database
        connection.execute("UPDATE points SET median = -1 WHERE label_id = "
                           "(SELECT id FROM labels WHERE name = 'c1')")
        connection.execute("UPDATE points SET median = 'abc' WHERE label_id = "
                           "(SELECT id FROM labels WHERE name = 'c2')")
    done = history("show", db=db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == "  ▁███  c0 … c5 (4)  last 2.000 ms"  # c1, c2 out


def test_an_unusable_results_file_adds_nothing_and_makes_no_database(tmp_path):
    db = tmp_path / "h.db"
    good = write_results(tmp_path / "good.json", header(), [record(0, 1.0)])
    for bad, why in ((tmp_path / "typo.json", "no such file"),
                     (tmp_path, "is a directory, not a regular file; a results file is a "
                                "regular file")):
        done = history("add", good, bad, "--label", "v1", db=db)
        assert (done.returncode, done.stderr, done.stdout) == (2, f"error: {bad}: {why}\n", "")
    assert not db.exists()


def test_a_run_in_a_git_work_tree_is_labelled_by_its_commit(tmp_path):
    """``sys_info.git_commit`` (the default history label) read from the work tree's files:
    a branch's ref, packed refs, a detached HEAD and a linked worktree."""
    import shutil

    from param_compute.runtime.sysinfo import git_commit

    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args, cwd=repo):
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    git("init", "-q")
    (repo / "f").write_text("1")
    git("add", "f")
    git("commit", "-qm", "one")
    head = git("rev-parse", "HEAD")
    (repo / "sub").mkdir()
    assert git_commit(str(repo / "sub")) == head  # from a folder below the root
    git("pack-refs", "--all")
    assert git_commit(str(repo)) == head  # the ref only in packed-refs
    git("worktree", "add", "-q", str(tmp_path / "wt"))
    assert git_commit(str(tmp_path / "wt")) == head
    git("checkout", "-q", "--detach")
    assert git_commit(str(repo)) == head
    assert git_commit(str(tmp_path)) is None  # outside any work tree (tmp has none above)
    header = {"sys_info": {"git_commit": head, "pytorch_version": "2.13.0"}}
    from param_compute.history.identity import default_label

    assert default_label(header) == head[:12]


# --- outliers neither hide a step nor make one (issue 31) ----------------------------------

def _history_of(tmp_path, medians, name):
    """A database of one steady config and one whose medians are ``medians``, a label each."""
    db = tmp_path / f"{name}.db"
    for index, median in enumerate(medians, 1):
        path = write_results(tmp_path / f"{name}-c{index}.json", header(start=f"s{index}"),
                             [record(0, 2.0), record(1, median)])
        assert history("add", path, "--label", f"c{index}", db=db).returncode == 0
    return db


def test_two_isolated_outliers_do_not_hide_a_step_that_three_labels_confirm(tmp_path):
    """Two isolated 3x labels among eight used to inflate the scatter until a clean +50% step
    confirmed by three labels passed the gate (exit 0)."""
    clean = _history_of(tmp_path, [1, 1, 1, 1, 1, 1.5, 1.5, 1.5], "clean")
    done = history("check", "--fail-on-regression", "10", db=clean)
    assert done.returncode == 1, done.stdout
    expected = ("regression: torch.mm|1|0|0 (65×64 f32) [forward] on h1 cpu/x86_64 1t torch "
                "2.13.0: +50.0% at c6 (1.000 ms → 1.500 ms)")
    assert expected in done.stdout.splitlines()
    hidden = _history_of(tmp_path, [1, 3, 1, 3, 1, 1.5, 1.5, 1.5], "outliers")
    done = history("check", "--fail-on-regression", "10", db=hidden)
    assert done.returncode == 1, done.stdout
    assert [line for line in done.stdout.splitlines() if line.startswith("regression")] == \
        [expected]
    assert "1 regression(s) of at least 10% in 2 series; 0 improvement(s)" in done.stdout
    alone = _history_of(tmp_path, [1, 3, 1, 1, 3, 1, 1, 1], "alone")
    done = history("check", "--fail-on-regression", "10", db=alone)
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert done.stdout == "0 regression(s) of at least 10% in 2 series; 0 improvement(s)\n"


def test_isolated_outliers_anywhere_never_hide_the_step_nor_make_one():
    """Every placement of two isolated 3x labels among eight around a +50% step at the sixth
    label; and the step levels are the labels', never an outlier's."""
    import itertools

    level = [1, 1, 1, 1.5, 1.5, 1.5]
    for first, second in itertools.combinations(range(8), 2):
        if second == first + 1:  # two in a row are a level of their own, not outliers
            continue
        rest = iter(level)
        medians = [3 if i in (first, second) else next(rest) for i in range(8)]
        steps = detect(points(medians))
        assert [(round(s.before, 3), round(s.after, 3)) for s in steps] == [(1, 1.5)], medians
        assert points(medians)[steps[0].index].median == 1.5  # the new level's first label
        outliers_only = [3 if i in (first, second) else 1 for i in range(8)]
        assert detect(points(outliers_only)) == [], outliers_only
    # two in a row at a new level are a level, as before; a lone odd label at the end is not
    assert [s.label for s in detect(points([1, 1, 1, 2, 2, 1, 1, 1]))] == ["c4", "c6"]
    assert detect(points([1, 1, 1, 1, 1, 3])) == []
