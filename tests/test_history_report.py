"""The history dashboard: a static page (overview, a plot per series, an op filter), escaped,
self-contained, and rendered by headless Chromium where it is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from test_history import header, history, record, write_results

EVIL_OP = '<b>evil</b>"op'
EVIL_LABEL = '"><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A history of 12 labels: torch.mm|0 20% slower from c7, torch.add|3 20% faster from
    c5, a steady series and one whose op name and one label are hostile HTML."""
    tmp = tmp_path_factory.mktemp("report")
    db = tmp / "h.db"
    for i in range(1, 13):
        records = [record(0, 1.2 if i >= 7 else 1.0), record(1, 0.5 + 0.002 * (i % 3)),
                   record(2, 2.0, op=EVIL_OP), record(3, 0.24 if i >= 5 else 0.3, op="torch.add")]
        label = EVIL_LABEL if i == 3 else f"c{i}"
        done = history("add", write_results(tmp / f"r{i}.json", header(start=f"t{i}"), records),
                       "--label", label, db=db)
        assert done.returncode == 0, done.stderr
    written = history("report", "-o", tmp / "site", "--title", "nightly <CI>", db=db)
    assert written.returncode == 0, written.stderr
    return tmp / "site" / "index.html"


def test_overview_plots_and_filter_are_on_one_self_contained_page(site):
    page = site.read_text(encoding="utf-8")
    assert "<title>nightly &lt;CI&gt;</title>" in page
    assert "Overview: 1 regression(s), 1 improvement(s)" in page
    overview = page.split("<h2>Series</h2>")[0]
    assert overview.index("+20.0%") < overview.index("-20.0%")  # regressions first
    assert '<td>c7</td>' in overview and '<td>c5</td>' in overview
    assert page.count('<svg class="plot"') == 4
    assert page.count('<polygon class="band"') == 4  # every series had intervals
    assert page.count('<line class="step regression"') == 1
    assert page.count('<line class="step improvement"') == 1
    assert '<option value="torch.add">torch.add</option>' in page
    assert re.search(r'<text class="label"[^>]*>c12</text>', page)  # labels on the axis
    # no network: nothing to fetch, and the policy would refuse it anyway
    assert "default-src 'none'" in page
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert "<link" not in page


def test_everything_from_the_data_is_escaped(site):
    page = site.read_text(encoding="utf-8")
    assert EVIL_OP not in page and "<b>evil" not in page
    assert "&lt;b&gt;evil&lt;/b&gt;&quot;op" in page
    assert "<img" not in page and "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<script>") == 1  # only the filter's own


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _chrome(site, tmp_path, *args):
    binary = _chromium()
    if binary is None:
        pytest.skip("no headless Chromium installed")
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
         "--v=0", *args], capture_output=True, text=True, timeout=120)


def test_chromium_renders_it_and_the_op_filter_works(site, tmp_path):
    done = _chrome(site, tmp_path, "--dump-dom", f"{site.as_uri()}#op=torch.add")
    assert done.returncode == 0, done.stderr[-500:]
    dom = done.stdout
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line
               or "Uncaught" in line]
    assert not console, console
    sections = re.findall(r'<section class="series( hidden)?" id="series-\d+" data-op="([^"]*)"',
                          dom)
    assert len(sections) == 4
    assert {op: bool(hidden) for hidden, op in sections} == {
        "torch.mm": True, "torch.add": False, "&lt;b&gt;evil&lt;/b&gt;&quot;op": True}
    assert '<span id="shown">1</span>' in dom  # the script ran and counted


def test_a_screenshot_for_the_closing_note(site, tmp_path):
    target = tmp_path / "history-report.png"
    done = _chrome(site, tmp_path, "--window-size=1000,1400", f"--screenshot={target}",
                   site.as_uri())
    assert done.returncode == 0 and target.stat().st_size > 10_000, done.stderr[-500:]
    keep = os.environ.get("PARAM_COMPUTE_SCREENS")  # a folder to keep it in, when asked
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(target, os.path.join(keep, target.name))


def test_the_dashboard_is_never_written_over_the_database(tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    db = folder / "index.html"  # the database where the dashboard would go
    history("add", write_results(tmp_path / "r.json", header(), [record(0, 1.0)]), "--label",
            "v1", db=db)
    before = db.read_bytes()
    done = history("report", "-o", folder, db=db)
    assert done.returncode == 2
    assert done.stderr == (f"error: index.html {db} is the history database file: writing it "
                           "would destroy the input; choose another output\n")
    assert db.read_bytes() == before
    assert history("show", db=db).returncode == 0
