"""Output paths checked before anything runs; resume that never loses or mixes; exports agree."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from conftest import read_results, run_cli, start_cli, tensor, write_spec
from param_compute.files import lock_results


def _range_spec(tmp_path, runs):
    spec = {"torch.add": {"input_iterator": "RangeConfigIterator",
                          "input_data_generator": "PyTorch:DefaultDataGenerator",
                          "config": [{"input": [{"args": [
                              tensor(4), {"type": "int", "value": [1, runs],
                                          "__range__": ["value"]}]}]}]}}
    return write_spec(tmp_path, spec)


@pytest.fixture
def finished(tmp_path):
    """A spec and a finished results file of 3 runs (5 lines)."""
    spec = _range_spec(tmp_path, 3)
    out = tmp_path / "res.json"
    assert run_cli("-c", spec, "--output", out).returncode == 0
    return spec, out, out.read_bytes()


@pytest.mark.parametrize("extra, message", [
    (("--csv", "{dir}"), "--csv {dir}: is a directory; name a file"),
    (("--oss-json", "{dir}"), "--oss-json {dir}: is a directory; name a file"),
    (("--csv", "{out}"), "--output and --csv name the same file"),
    (("--csv", "/dev/full"), "--csv /dev/full: is not a regular file"),
    (("--csv", "{out}", "--oss-json", "{tmp}/o.json"), "name the same file"),
    (("--csv", "{tmp}/notadir.txt/x.csv"), "Not a directory"),
])
def test_a_bad_output_is_refused_before_anything_is_touched(tmp_path, finished, extra, message):
    spec, out, before = finished
    (tmp_path / "adir").mkdir()
    (tmp_path / "notadir.txt").write_text("x")
    values = {"dir": tmp_path / "adir", "out": out, "tmp": tmp_path}
    argv = [a.format(**values) for a in extra]
    result = run_cli("-c", spec, "--output", out, *argv)
    assert result.returncode == 2, result.stderr
    assert message.format(**values) in result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert out.read_bytes() == before  # not truncated, not appended to


def test_an_output_naming_the_spec_is_refused(tmp_path):
    spec = _range_spec(tmp_path, 2)
    text = spec.read_text()
    result = run_cli("-c", spec, "--output", spec)
    assert result.returncode == 2
    assert f"--output {spec} is the -c/--config spec file" in result.stderr
    assert spec.read_text() == text
    csv_over_spec = run_cli("-c", spec, "--output", tmp_path / "r.json", "--csv", spec)
    assert csv_over_spec.returncode == 2 and spec.read_text() == text


def test_a_planted_symlink_is_never_followed(tmp_path):
    spec = _range_spec(tmp_path, 2)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "r.json"
    link.symlink_to(victim)
    result = run_cli("-c", spec, "--output", link)
    assert result.returncode == 2 and "is a symbolic link" in result.stderr
    csv_link = tmp_path / "r.csv"
    csv_link.symlink_to(victim)
    result = run_cli("-c", spec, "--output", tmp_path / "ok.json", "--csv", csv_link)
    assert result.returncode == 2 and "--csv" in result.stderr
    assert victim.read_text() == "precious\n"


def test_default_names_never_land_on_an_existing_file(tmp_path):
    from param_compute.files import unused_name

    taken = tmp_path / "benchmark_result_1_2.json"
    taken.write_text("x")
    (tmp_path / "benchmark_result_1_2_1.json").symlink_to(tmp_path / "nowhere")
    assert unused_name(taken) == tmp_path / "benchmark_result_1_2_2.json"


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path, finished):
    spec, out, before = finished
    lock = lock_results(out)
    try:
        result = run_cli("-c", spec, "--output", out, "--resume")
        assert result.returncode == 2
        assert "another run is writing this results file" in result.stderr
        assert run_cli("-c", spec, "--output", out).returncode == 2
    finally:
        lock.release()
    assert out.read_bytes() == before
    assert run_cli("-c", spec, "--output", out, "--resume").returncode == 0


def test_resume_refuses_other_settings_unless_asked_to_mix(tmp_path):
    spec = _range_spec(tmp_path, 4)
    out = tmp_path / "r.json"
    assert run_cli("-c", spec, "--output", out, "-i", "2",
                   "--stop-id", "torch.add|0|0|0_2").returncode == 0
    before = out.read_bytes()
    mixed = run_cli("-c", spec, "--output", out, "--resume", "-i", "7", "-b", "--seed", "5")
    assert mixed.returncode == 2
    for part in ("iteration: 2 in the file, 7 now", "backward: False in the file, True now",
                 "seed: 0 in the file, 5 now", "--resume-mixed"):
        assert part in mixed.stderr
    assert out.read_bytes() == before
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    header["sys_info"]["hostname"] = "elsewhere"
    out.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    moved = run_cli("-c", spec, "--output", out, "--resume", "-i", "2")
    assert moved.returncode == 2 and "hostname: 'elsewhere' in the file" in moved.stderr
    allowed = run_cli("-c", spec, "--output", out, "--resume", "-i", "3", "--resume-mixed")
    assert allowed.returncode == 0, allowed.stderr
    ids = [r["id"] for r in read_results(out)[1] if "op_name" in r]
    assert ids == [f"0|0|0_{i}" for i in range(4)]


def test_resume_refuses_a_header_without_a_spec_hash(tmp_path):
    spec = _range_spec(tmp_path, 3)
    out = tmp_path / "r.json"
    assert run_cli("-c", spec, "--output", out, "--stop-id", "torch.add|0|0|0_1").returncode == 0
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    del header["run_options"]["spec_sha256"]
    out.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    result = run_cli("-c", spec, "--output", out, "--resume")
    assert result.returncode == 2 and "names no spec (no spec_sha256" in result.stderr


def test_csv_and_oss_json_hold_every_run_after_resume_and_append(tmp_path):
    spec = _range_spec(tmp_path, 5)
    out, table, oss = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "oss.json"
    exports = ("--csv", table, "--oss-json", oss)
    assert run_cli("-c", spec, "--output", out, "--stop-id", "torch.add|0|0|0_2",
                   *exports).returncode == 0
    assert len(list(csv.DictReader(table.open()))) == 2
    assert run_cli("-c", spec, "--output", out, "--resume", *exports).returncode == 0
    rows = list(csv.DictReader(table.open()))
    assert sorted(r["id"] for r in rows) == [f"0|0|0_{i}" for i in range(5)]
    oss_ids = {entry["model"]["extra_info"]["id"] for entry in json.loads(oss.read_text())}
    assert sorted(oss_ids) == [f"0|0|0_{i}" for i in range(5)]
    assert run_cli("-c", spec, "--output", out, "-a", *exports).returncode == 0
    assert len(list(csv.DictReader(table.open()))) == 10


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_location_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = run_cli("-c", _range_spec(tmp_path, 2), "--output", locked / "r.json")
        assert result.returncode == 2 and "cannot create files in" in result.stderr
    finally:
        locked.chmod(0o700)


def test_a_refused_run_leaves_no_empty_results_file(tmp_path):
    spec = _range_spec(tmp_path, 2)
    out = tmp_path / "new.json"
    result = run_cli("-c", spec, "--output", out, "--csv", tmp_path)
    assert result.returncode == 2 and not out.exists()
    lock = lock_results(out)
    assert out.exists()
    lock.release()
    assert not out.exists()


def test_outputs_may_all_be_discarded(tmp_path):
    result = run_cli("-c", _range_spec(tmp_path, 2), "--output", os.devnull, "--csv", os.devnull,
                     "--oss-json", os.devnull)
    assert result.returncode == 0, result.stderr
    assert Path(os.devnull).is_char_device() and not Path(os.devnull + ".running").exists()


def test_a_concurrent_resume_of_a_running_file_is_refused(tmp_path):
    """Two processes: while one writes the results, a resume of the same file exits 2 and the
    first run's file ends with each id once."""
    import signal
    import time

    spec = _range_spec(tmp_path, 5000)
    out = tmp_path / "r.json"
    first = start_cli("-c", spec, "--output", out, "-i", "2000")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or
                                               out.read_text().count("\n") < 3):
            time.sleep(0.05)
        second = run_cli("-c", spec, "--output", out, "--resume", "-i", "2000")
        assert first.poll() is None, "the first run ended too soon to show anything"
        assert second.returncode == 2, second.stderr
        assert "another run is writing this results file" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()
           if '"op_name"' in line]
    assert ids and len(ids) == len(set(ids))


def test_resume_refuses_other_repetitions_or_cold_but_not_an_unused_max_time(tmp_path):
    spec = _range_spec(tmp_path, 4)
    out = tmp_path / "r.json"
    assert run_cli("-c", spec, "--output", out, "-i", "2",
                   "--stop-id", "torch.add|0|0|0_2").returncode == 0
    before = out.read_bytes()
    mixed = run_cli("-c", spec, "--output", out, "--resume", "-i", "2", "--repetitions", "2",
                    "--cold")
    assert mixed.returncode == 2
    assert mixed.stderr.strip().splitlines()[-1] == (
        f"error: --resume: {out} was measured with other settings (repetitions: 1 in the file, "
        "2 now; cold: None in the file, 'rotate' now); rerun with the same options, write to a "
        "new --output, or pass --resume-mixed to mix them")
    assert out.read_bytes() == before
    # --max-time bounds --max-noise only: without it, another value measures the same
    assert run_cli("-c", spec, "--output", out, "--resume", "-i", "2",
                   "--max-time", "3").returncode == 0
