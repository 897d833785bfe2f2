"""The results history on PostgreSQL: the same schema and commands against a real server.

The server is started by the test itself (Debian's ``postgresql`` package: ``initdb`` and
``pg_ctl`` under ``/usr/lib/postgresql/*/bin``) on a Unix socket in a temporary folder, as the
``postgres`` user when the tests run as root; skipped where there is no server or no psycopg.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from test_history import counts, header, history, record, write_results

psycopg = pytest.importorskip("psycopg")


def _bin(name: str):
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or \
        ([shutil.which(name)] if shutil.which(name) else [])
    return found[-1] if found else None


def _as_server_user(argv):
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL")
    return [runuser, "-u", "postgres", "--", *argv]


@pytest.fixture(scope="module")
def server():
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("no PostgreSQL server installed (Debian: apt-get install postgresql)")
    if os.geteuid() == 0:
        try:
            import pwd

            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user")
    folder = Path(tempfile.mkdtemp(prefix="history-pg-"))
    if os.geteuid() == 0:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data = folder / "data"
    user = "postgres" if os.geteuid() == 0 else None
    made = subprocess.run(_as_server_user([initdb, "-D", str(data), "-A", "trust", "-E",
                                           "UTF8", "-U", "postgres"]),
                          capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"initdb failed: {made.stderr.strip()[-300:]}")
    started = subprocess.run(_as_server_user(
        [pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-w", "-t", "60", "-o",
         f"-k {folder} -c listen_addresses='' -c fsync=off", "start"]),
        capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        log = (folder / "log").read_text() if (folder / "log").exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {(started.stderr + log).strip()[-300:]}")
    try:
        yield {"folder": folder, "user": user or "postgres"}
    finally:
        subprocess.run(_as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def db(server, request):
    """A fresh database on the server for one test: its URL."""
    name = "h_" + request.node.name.lower()[:40].replace("[", "_").replace("]", "")
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    admin = f"postgresql://postgres@/postgres?host={server['folder']}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name}")
        connection.execute(f"CREATE DATABASE {name}")
    return f"postgresql://postgres@/{name}?host={server['folder']}"


def test_add_show_check_on_postgresql(tmp_path, db):
    for index in range(1, 7):
        slow = 1.25 if index >= 4 else 1.0
        records = [record(0, 1.0 + 0.001 * (index % 2)), record(1, 2.0 * slow)]
        path = write_results(tmp_path / f"c{index}.json", header(start=f"t{index}"), records)
        done = history("add", path, "--label", f"c{index}", db=db)
        assert done.returncode == 0, done.stderr
    again = history("add", tmp_path / "c1.json", db=db)
    assert "already in the history (label c1" in again.stdout
    assert counts(db) == {"machines": 1, "labels": 6, "runs": 6, "series": 2, "points": 12}
    shown = history("show", db=db)
    assert "torch.mm|1|0|0 (65×64 f32) [forward] on h1" in shown.stdout
    assert "▁▁▁███  c1 … c6 (6)" in shown.stdout
    checked = history("check", "--fail-on-regression", "10", db=db)
    assert checked.returncode == 1
    [regression] = [line for line in checked.stdout.splitlines() if "regression:" in line]
    assert "torch.mm|1|0|0" in regression and "+25.0% at c4" in regression


def test_a_failed_add_on_postgresql_leaves_nothing(tmp_path, db, monkeypatch):
    from param_compute.history import store as store_module

    path = write_results(tmp_path / "r.json", header(), [record(i, 1.0) for i in range(10)])

    def broken(self, rows):
        raise RuntimeError("disk full")

    monkeypatch.setattr(store_module.HistoryStore, "put_points", broken)
    with pytest.raises(RuntimeError):
        history("add", path, "--label", "v1", db=db)
    monkeypatch.undo()
    assert counts(db) == {"machines": 0, "labels": 0, "runs": 0, "series": 0, "points": 0}
    assert history("add", path, "--label", "v1", db=db).returncode == 0
    assert counts(db)["points"] == 10


def test_postgresql_database_of_something_else_or_unreachable(server, db):
    with psycopg.connect(db, autocommit=True) as connection:
        connection.execute("CREATE TABLE accounts (id integer)")
    done = history("show", db=db)
    assert done.returncode == 2
    assert "not a param_compute history database (it has tables, but no history_meta: " \
           "accounts)" in done.stderr
    away = history("show", db=f"postgresql://postgres:secret@/nothere?host={server['folder']}")
    assert away.returncode == 2 and "cannot connect" in away.stderr
    assert "secret" not in away.stderr and "postgres:***@" in away.stderr


def test_a_libpq_connection_string_and_every_credential_masked(tmp_path, server, db):
    """``--db "host=... dbname=..."`` is PostgreSQL (it was taken for an SQLite path, and its
    password printed); a ``?password=`` in a URL is masked as ``user:pw@`` is (issue 31)."""
    name = db.split("@/", 1)[1].split("?")[0]
    conninfo = f"host={server['folder']} dbname={name} user=postgres password='not used'"
    path = write_results(tmp_path / "r.json", header(), [record(0, 1.0)])
    done = history("add", path, "--label", "v1", db=conninfo)
    assert done.returncode == 0, done.stderr
    assert "▁  v1 (1)  last 1.000 ms" in history("show", db=conninfo).stdout
    assert not list(tmp_path.glob("host=*"))  # no SQLite file of that name
    for url in (f"postgresql://postgres@/nothere?host={server['folder']}&password=hunter2",
                f"host={server['folder']} dbname=nothere user=postgres password=hunter2"):
        away = history("show", db=url)
        assert away.returncode == 2 and "cannot connect" in away.stderr, away.stderr
        assert "hunter2" not in away.stderr and "password=***" in away.stderr
        assert away.stderr.count("\n") == 1
