"""A captured spec's ``__capture__`` settings: written by capture, validated, warned about by
run_benchmark when a run differs, followed with ``--match-capture``."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import read_results, run_cli, simple_op, tensor, write_spec
from param_compute.capture import capture_ops
from param_compute.errors import EXIT_INVALID
from param_compute.process.allocator import allocator_settings, describe
from param_compute.spec.reserved import capture_problems, differences, recorded_threads


def _spec(settings):
    spec = simple_op("torch.neg", tensor(8))
    if settings is not None:
        spec["__capture__"] = settings
    return spec


def test_a_live_capture_writes_its_device_and_thread_count(tmp_path):
    with capture_ops(source="test") as cap:
        torch.ones(4).neg()
    spec_path, _ = cap.write(tmp_path / "spec.json")
    spec = json.loads(spec_path.read_text())
    assert spec["__capture__"] == {"device": "cpu", "num_threads": torch.get_num_threads(),
                                   "source": "test", "allocator": allocator_settings()}
    assert "__capture__" not in cap.spec()  # the operators only, for code reading them
    param_path, _ = cap.write(tmp_path / "param.json", param_form=True)
    assert "__capture__" not in json.loads(param_path.read_text())  # PARAM: every key an op
    assert json.loads((tmp_path / "spec.capture.json").read_text())["num_threads"] \
        == torch.get_num_threads()


def test_a_run_that_differs_is_warned_about_and_match_capture_follows(tmp_path):
    spec = write_spec(tmp_path, _spec({"device": "cpu", "num_threads": 2, "source": "t"}))
    out = tmp_path / "r.json"
    warned = run_cli("-c", spec, "--output", out, "--num-threads", "1")
    assert warned.returncode == 0, warned.stderr
    assert "differs from the captured workload: --num-threads 1 (captured with 2)" \
        in warned.stderr
    header, [run], _ = read_results(out)
    assert header["run_options"]["num_threads"] == 1 and run["status"] == "ok"
    followed = run_cli("-c", spec, "--output", tmp_path / "m.json", "--match-capture")
    assert followed.returncode == 0, followed.stderr
    assert "differs from the captured" not in followed.stderr
    assert "--match-capture: running with -d cpu --num-threads 2, as captured" in followed.stderr
    header, _, _ = read_results(tmp_path / "m.json")
    assert header["run_options"]["num_threads"] == 2


def test_matching_runs_and_unknown_thread_counts_say_nothing(tmp_path):
    same = write_spec(tmp_path, _spec({"device": "cpu", "num_threads": 1, "source": "t"}),
                      "same.json")
    unknown = write_spec(tmp_path, _spec({"device": "cpu", "num_threads": None}), "u.json")
    for spec in (same, unknown):
        result = run_cli("-c", spec, "--output", tmp_path / f"{spec.stem}.r.json")
        assert result.returncode == 0 and "differs from" not in result.stderr, result.stderr
    result = run_cli("-c", unknown, "--output", tmp_path / "u2.json", "--match-capture")
    assert "did not record its thread count" in result.stderr
    plain = write_spec(tmp_path, _spec(None), "plain.json")
    result = run_cli("-c", plain, "--output", tmp_path / "p.json", "--match-capture")
    assert "records no capture settings" in result.stderr and result.returncode == 0


def test_bad_capture_settings_are_refused_with_their_path(tmp_path):
    spec = write_spec(tmp_path, _spec({"device": "tpu", "num_threads": True, "when": 1}))
    result = run_cli("-c", spec, "--output", tmp_path / "r.json")
    assert result.returncode == EXIT_INVALID
    for text in ("__capture__.device: not a device: 'tpu'", "__capture__.num_threads: "
                 "num_threads is an integer from 1", "__capture__.when: unknown key 'when'"):
        assert text in result.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("value, threads", [("4", 4), (16, 16), ("0", None), ("many", None),
                                            (True, None), (None, None), (10**9, None)])
def test_recorded_thread_counts_are_read_only_when_believable(value, threads):
    assert recorded_threads(value) == threads


def test_differences_compare_device_kinds_and_threads():
    settings = {"device": "cuda", "num_threads": 8}
    assert differences(settings, "cuda:3", 8) == []  # a rank's own GPU is the same kind
    assert differences(settings, "cpu", 1) == ["device cpu (captured on cuda)",
                                               "--num-threads 1 (captured with 8)"]
    assert differences(None, "cpu", 1) == []
    assert capture_problems([]) and capture_problems({"device": "cuda:1"}) == []


# -- the host allocator's settings ---------------------------------------------------------------
TUNED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=17179869184"


def test_allocator_settings_keep_what_changes_the_allocator_only():
    environ = {"GLIBC_TUNABLES": f"glibc.rtld.nns=2:{TUNED}", "MALLOC_ARENA_MAX": "2",
               "LD_PRELOAD": "/usr/lib/libfoo.so:/opt/lib/libjemalloc.so.2", "PATH": "/bin"}
    assert allocator_settings(environ) == {"GLIBC_TUNABLES": TUNED, "MALLOC_ARENA_MAX": "2",
                                           "LD_PRELOAD": "libjemalloc.so.2"}
    assert allocator_settings({"LD_PRELOAD": "/usr/lib/libfoo.so"}) == {}
    swapped = ":".join(reversed(TUNED.split(":")))  # the same tunables in another order
    assert allocator_settings({"GLIBC_TUNABLES": swapped}) == \
        allocator_settings({"GLIBC_TUNABLES": TUNED})
    assert allocator_settings({}) == {} and describe({}) == "glibc's defaults"
    assert describe({"MALLOC_ARENA_MAX": "2"}) == "MALLOC_ARENA_MAX=2"


def test_a_live_capture_records_the_allocator_settings_it_ran_with(tmp_path, monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", TUNED)
    with capture_ops(source="test") as cap:
        torch.ones(4).neg()
    spec_path, _ = cap.write(tmp_path / "spec.json")
    assert json.loads(spec_path.read_text())["__capture__"]["allocator"] == {
        "GLIBC_TUNABLES": TUNED}
    header, _, _ = read_results_of_run(tmp_path, spec_path)
    assert header["sys_info"]["allocator"] == {"GLIBC_TUNABLES": TUNED}


def read_results_of_run(tmp_path, spec_path):
    out = tmp_path / "run.json"
    done = run_cli("-c", spec_path, "--output", out, "-i", "2")
    assert done.returncode == 0, done.stderr
    assert "allocator" not in done.stderr  # run as captured: nothing to say
    return read_results(out)


def test_a_run_under_other_allocator_settings_is_warned_about(tmp_path, monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    for name in ("LD_PRELOAD", "MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    spec = write_spec(tmp_path, _spec({"device": "cpu", "num_threads": 1,
                                       "allocator": {"GLIBC_TUNABLES": TUNED}}))
    warned = run_cli("-c", spec, "--output", tmp_path / "r.json", "-i", "2")
    assert warned.returncode == 0, warned.stderr
    assert (f"differs from the captured workload: allocator glibc's defaults (captured with "
            f"GLIBC_TUNABLES={TUNED})") in warned.stderr
    assert f"Start it with GLIBC_TUNABLES={TUNED} in its environment" in warned.stderr
    followed = run_cli("-c", spec, "--output", tmp_path / "m.json", "-i", "2",
                       "--match-capture")
    assert "--match-capture cannot change a running process's allocator" in followed.stderr
    monkeypatch.setenv("GLIBC_TUNABLES", TUNED)
    same = run_cli("-c", spec, "--output", tmp_path / "s.json", "-i", "2")
    assert "allocator" not in same.stderr
    defaults = write_spec(tmp_path, _spec({"device": "cpu", "allocator": {}}), "d.json")
    other = run_cli("-c", defaults, "--output", tmp_path / "d.r.json", "-i", "2")
    assert "captured with glibc's defaults" in other.stderr
    assert "none of them set (glibc's defaults)" in other.stderr


@pytest.mark.parametrize("allocator, words", [
    ([], "__capture__.allocator: allocator is an object"),
    ({"PATH": "/bin"}, "__capture__.allocator.PATH: not an allocator setting: 'PATH'"),
    ({"GLIBC_TUNABLES": 5}, "__capture__.allocator.GLIBC_TUNABLES: GLIBC_TUNABLES is text"),
    # shown in warnings: a terminal would act on escapes, a newline would forge a log line
    ({"MALLOC_CONF": "\x1b]0;owned\x07\x1b[2J"},
     "__capture__.allocator.MALLOC_CONF: MALLOC_CONF is text of at most 1000 printable"),
    ({"MALLOC_CONF": "x" * 1001}, "MALLOC_CONF is text of at most 1000 printable characters"),
    ({"\x1b[2J\nWARNING: FAKE": "1"}, "__capture__.allocator.\\x1b[2J\\nWARNING: FAKE: key "
                                     "'\\x1b[2J\\nWARNING: FAKE' contains the non-printable "
                                     "character U+001B"),
])
def test_bad_allocator_settings_are_refused_with_their_path(tmp_path, allocator, words):
    spec = write_spec(tmp_path, _spec({"device": "cpu", "allocator": allocator}))
    result = run_cli("-c", spec, "--output", tmp_path / "r.json")
    assert result.returncode == EXIT_INVALID and words in result.stderr, result.stderr
    assert "\x1b" not in result.stderr and "\nWARNING: FAKE" not in result.stderr
    assert not (tmp_path / "r.json").exists()


def test_allocator_settings_are_shown_as_a_shell_takes_them_back():
    """The warning's advice is pasted into a shell: quoted where it must be, never run."""
    assert describe({"GLIBC_TUNABLES": TUNED}) == f"GLIBC_TUNABLES={TUNED}"
    assert describe({"MALLOC_CONF": "x; rm -rf ~"}) == "MALLOC_CONF='x; rm -rf ~'"
    shown = describe({"MALLOC_CONF": "a\x1b[2J\nb"})
    assert shown.isprintable() and "\\x1b" in shown and "\\n" in shown, shown
    # this process's own environment: recorded as escapes, a setting a spec can hold
    kept = allocator_settings({"MALLOC_CONF": "a\tb\nc"})
    assert kept == {"MALLOC_CONF": "a\\tb\\nc"} and capture_problems({"allocator": kept}) == []
