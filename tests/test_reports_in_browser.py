"""Each HTML report opened in a real browser (headless Chromium, when installed): the run report,
a captured workload's report, a step replay's timeline and the compare page load with no error,
every image decodes, no page is wider than the window, and a screenshot of each is taken (into ``$PARAM_COMPUTE_SCREENS``
when set, to look at; else a temporary folder)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from test_report_readable import (captured_records, record, sweep_records, tensor,
                                  write_results)

pytest.importorskip("matplotlib")
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium"
                                        if os.access("/usr/bin/chromium", os.X_OK) else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed")

WINDOW = (1400, 2000)

#: Injected into a copy of the page (the reports themselves carry no script): records every
#: error, failed resource and console error, and what the page looks like once loaded.
PROBE = """<script>
window.__problems = [];
window.addEventListener("error", function (event) {
  var what = event.message || (event.target && event.target.outerHTML || "").slice(0, 120);
  window.__problems.push("error: " + what);
}, true);
var originalError = console.error;
console.error = function () {
  window.__problems.push("console: " + Array.prototype.join.call(arguments, " "));
  originalError.apply(console, arguments);
};
window.addEventListener("load", function () {
  Array.prototype.forEach.call(document.images, function (img) {
    if (!img.complete || img.naturalWidth === 0) window.__problems.push("image: " + img.alt);
  });
  var out = document.createElement("pre");
  out.id = "probe";
  var timeline = document.querySelector("svg.step-timeline");
  var box = timeline && timeline.getBoundingClientRect();
  var calls = document.querySelectorAll("svg.step-timeline rect.call");
  var outside = Array.prototype.filter.call(calls, function (rect) {
    var r = rect.getBoundingClientRect();
    return r.width <= 0 || r.height <= 0 || r.left < box.left - 0.5 || r.right > box.right + 0.5
      || r.top < box.top || r.bottom > box.bottom;
  }).length;
  out.textContent = JSON.stringify({problems: window.__problems,
    width: document.documentElement.scrollWidth, images: document.images.length,
    svgs: document.querySelectorAll("svg").length,
    lanes: document.querySelectorAll("svg.step-timeline g.lane").length,
    calls: calls.length, outside: outside,
    legend: document.querySelectorAll("svg.step-timeline g.legend g.entry").length,
    titled: document.querySelectorAll("svg.step-timeline rect.call > title").length});
  document.body.appendChild(out);
});
</script>"""

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-extensions", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
         f"--window-size={WINDOW[0]},{WINDOW[1]}"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})


def _open(page: Path, tmp_path: Path, name: str) -> dict:
    """Load ``page`` (a probed copy) and take a screenshot of the page itself."""
    probed = tmp_path / f"{name}.probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1),
                      encoding="utf-8")
    dom = _chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", probed.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert found, f"{name}: the page never finished loading\n{dom.stderr[-2000:]}"
    probe = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")
                       .replace("&lt;", "<").replace("&gt;", ">"))
    logged = [line for line in dom.stderr.splitlines()
              if "CONSOLE" in line or "Uncaught" in line]
    probe["logged"] = logged
    screens = Path(os.environ.get("PARAM_COMPUTE_SCREENS") or tmp_path)
    screens.mkdir(parents=True, exist_ok=True)
    shot = screens / f"{name}.png"
    taken = _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]
    probe["screenshot"] = shot
    return probe


def _clean(probe: dict, name: str) -> None:
    assert probe["problems"] == [], f"{name}: {probe['problems']}"
    assert probe["logged"] == [], f"{name}: {probe['logged']}"
    assert probe["width"] <= WINDOW[0], f"{name}: {probe['width']} px wide, wider than the window"


def test_run_report_in_a_browser(tmp_path):
    results = write_results(tmp_path / "run.json", sweep_records())
    html = tmp_path / "run.html"
    assert run_cli(results, "-o", html, module="param_compute.report").returncode == 0
    probe = _open(html, tmp_path, "run_report")
    _clean(probe, "run report")
    assert probe["images"] == 2 and probe["svgs"] == 1  # mm lines, softmax bars; roofline


def test_captured_workload_report_in_a_browser(tmp_path):
    results = write_results(tmp_path / "captured.json", captured_records())
    html = tmp_path / "captured.html"
    assert run_cli(results, "-o", html, module="param_compute.report").returncode == 0
    probe = _open(html, tmp_path, "workload_report")
    _clean(probe, "captured workload report")
    assert probe["images"] == 0  # captured configs are no sweep


def test_compare_report_in_a_browser(tmp_path):
    def side(factor):
        return [record("torch.mm", f"0|0|0_{i}", [tensor(n, 64), tensor(64, n)],
                       0.1 * n / 64 * (factor if i % 2 else 1)) for i, n in
                enumerate((64, 128, 256, 512))]

    base = write_results(tmp_path / "base.json", side(1.0))
    new = write_results(tmp_path / "new.json", side(0.7))
    html = tmp_path / "compare.html"
    result = run_cli(base, new, "--html", html, module="param_compute.compare")
    assert result.returncode == 0, result.stderr
    probe = _open(html, tmp_path, "compare_report")
    _clean(probe, "compare report")
    assert probe["svgs"] == 4  # a speedup bar per compared pass


def test_step_timeline_in_a_browser(tmp_path):
    """The step replay's timeline: two lanes of rectangles inside the picture, each with its
    hover title, a legend; 3,000 calls a lane drawn as at most two rectangles a pixel."""
    from test_step_trace import _results

    results = _results(tmp_path, 3000)
    html = tmp_path / "timeline.html"
    report = run_cli(results, "-o", html, module="param_compute.report")
    assert report.returncode == 0 and report.stderr == "", report.stderr
    probe = _open(html, tmp_path, "step_timeline")
    _clean(probe, "step timeline")
    assert probe["svgs"] == 1 and probe["lanes"] == 2 and probe["legend"] == 5
    assert 100 < probe["calls"] <= 4000 and probe["titled"] == probe["calls"]
    assert probe["outside"] == 0


def test_a_garbled_step_timeline_still_renders_in_a_browser(tmp_path):
    from test_step_trace import _results

    results = _results(tmp_path, 40, timeline={"version": 1, "layout": "measured",
                                               "runs": ["<b>x|0|0|0"], "run": [0],
                                               "start_us": ["soon"], "dur_us": [1]})
    html = tmp_path / "garbled.html"
    report = run_cli(results, "-o", html, module="param_compute.report")
    assert report.returncode == 0
    assert f"warning: {results}:2: step record's step.timeline.start_us[0] is not a number" \
           in report.stderr
    probe = _open(html, tmp_path, "garbled_timeline")
    _clean(probe, "garbled step timeline")
    assert probe["lanes"] == 0 and probe["svgs"] == 0


def test_the_probe_sees_what_a_broken_page_does(tmp_path, monkeypatch):
    monkeypatch.delenv("PARAM_COMPUTE_SCREENS", raising=False)  # no screenshot kept
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><head><title>x</title></head><body>"
                    "<img alt=\"bad\" src=\"data:image/png;base64,AAAA\">"
                    "<div style=\"width:3000px\">wide</div>"
                    "<script>console.error(\"boom\"); undefinedFunction();</script>"
                    "</body></html>")
    probe = _open(page, tmp_path, "broken")
    problems = " ".join(probe["problems"])
    assert "console: boom" in problems and "undefinedFunction" in problems
    assert "image: bad" in problems and probe["width"] > WINDOW[0]
