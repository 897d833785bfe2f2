"""The history and the results files cannot be turned against the user (issue 31).

Another application's SQLite file is never written (not even switched to WAL); a read-only
file or mount is read by show/check/report and refused by add naming it; a full disk is one
line and the history as it was; credentials never reach a message and unreachable PostgreSQL
hosts fail in seconds; a hostile or damaged database is read bounded, without a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import time

import pytest

from test_history import counts, header, history, record, write_results
from param_compute.history import backends
from param_compute.history.backends import APPLICATION_ID, is_postgres, scrubbed, shown


def _results(tmp_path, name="r.json", count=3, **head):
    return write_results(tmp_path / name, header(**head), [record(i, 1.0 + i)
                                                            for i in range(count)])


def _listing(folder):
    return sorted(os.listdir(folder))


# --- another application's database is never written ----------------------------------------

@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_another_application_s_sqlite_file_is_refused_without_a_byte_changed(tmp_path, journal):
    """``add`` used to switch a foreign file to WAL (header bytes 18-19) before refusing it."""
    foreign = tmp_path / "accounts.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute(f"PRAGMA journal_mode = {journal}")
        connection.execute("CREATE TABLE accounts (id INTEGER, owner TEXT)")
        connection.execute("INSERT INTO accounts VALUES (1, 'alice')")
    connection.close()
    before, listing = foreign.read_bytes(), _listing(tmp_path)
    results = _results(tmp_path)
    listing = _listing(tmp_path)
    for args in (("add", results, "--label", "v1"), ("show",), ("check",),
                 ("report", "-o", tmp_path / "site")):
        done = history(*args, db=foreign)
        assert (done.returncode, done.stdout) == (2, ""), args
        assert done.stderr == (f"error: {foreign}: not a param_compute history database (it "
                               "has tables, but no history_meta: accounts)\n"), args
    assert foreign.read_bytes() == before  # not one byte, the journal mode included
    assert _listing(tmp_path) == listing  # no log, no shared memory, no site left beside it


def test_a_database_marked_by_another_application_is_refused_before_sqlite_opens_it(tmp_path):
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("PRAGMA application_id = 1234")
        connection.execute("CREATE TABLE history_meta (key TEXT, value TEXT)")
    connection.close()
    before = foreign.read_bytes()
    done = history("add", _results(tmp_path), "--label", "v1", db=foreign)
    assert (done.returncode, done.stderr) == (2, f"error: {foreign}: not a history database "
                                                 "(another application's SQLite database: "
                                                 "application_id 0x000004d2)\n")
    assert foreign.read_bytes() == before


def test_a_new_history_is_marked_as_ours_and_an_unmarked_old_one_still_reads(tmp_path):
    db = tmp_path / "h.db"
    assert history("add", _results(tmp_path), "--label", "v1", db=db).returncode == 0
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        connection.execute("PRAGMA application_id = 0")  # as made before the mark
    connection.close()
    shown_ = history("show", db=db)
    assert shown_.returncode == 0 and "v1 (1)" in shown_.stdout
    again = history("add", _results(tmp_path, "s.json", start="s"), "--label", "v2", db=db)
    assert again.returncode == 0, again.stderr
    assert counts(db)["labels"] == 2
    assert _listing(tmp_path) == ["h.db", "r.json", "s.json"]  # the log checkpointed away


# --- read-only files and mounts ---------------------------------------------------------------

def _history_db(tmp_path):
    db = tmp_path / "ro" / "h.db"
    db.parent.mkdir()
    for index in range(1, 5):
        path = write_results(tmp_path / f"c{index}.json", header(start=f"s{index}"),
                             [record(0, 1.0), record(1, 1.0 if index < 3 else 1.5)])
        assert history("add", path, "--label", f"c{index}", db=db).returncode == 0
    return db


def _reads_and_refusal(tmp_path, db):
    """What show, check and report say, and add's refusal (the database unchanged)."""
    before, listing = db.read_bytes(), _listing(db.parent)
    shown_ = history("show", db=db)
    assert shown_.returncode == 0, shown_.stderr
    assert "▁▁██  c1 … c4 (4)  last 1.500 ms" in shown_.stdout
    checked = history("check", db=db)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "+50.0% at c3 (1.000 ms → 1.500 ms)" in checked.stdout
    site = tmp_path / "site"
    reported = history("report", "-o", site, db=db)
    assert reported.returncode == 0 and (site / "index.html").is_file(), reported.stderr
    added = history("add", _results(tmp_path, "new.json", start="n"), "--label", "c5", db=db)
    assert (added.returncode, added.stdout) == (2, "")
    assert added.stderr == (f"error: {db}: read-only (the file or its folder cannot be "
                            "written): nothing added; show, check and report read it as it "
                            "is\n")
    assert db.read_bytes() == before and _listing(db.parent) == listing


def test_a_read_only_history_is_read_and_add_says_read_only(tmp_path):
    """With the file and its folder read-only (where permissions bind: not as root)."""
    db = _history_db(tmp_path)
    os.chmod(db, 0o444)
    os.chmod(db.parent, 0o555)
    try:
        if os.access(db, os.W_OK) or os.access(db.parent, os.W_OK):
            pytest.skip("permissions do not bind here (root): see the mount test below")
        _reads_and_refusal(tmp_path, db)
    finally:
        os.chmod(db.parent, 0o755)
        os.chmod(db, 0o644)


def test_on_a_read_only_mount_show_check_report_read_and_add_says_read_only(tmp_path,
                                                                           monkeypatch):
    """A read-only mount as SQLite meets it: nothing can be created beside the file (its
    shared memory), nothing written. Show, check and report said "not a history database"."""
    db = _history_db(tmp_path)
    opened = []
    connect = backends._connect_sqlite

    def read_only_mount(path, mode):
        opened.append(mode)
        if mode != "immutable":  # rw, rwc: EROFS; ro of a WAL file: no shared memory
            raise sqlite3.OperationalError("unable to open database file")
        return connect(path, mode)

    monkeypatch.setattr(backends, "_connect_sqlite", read_only_mount)
    monkeypatch.setattr(backends, "_writable", lambda path: False)
    _reads_and_refusal(tmp_path, db)
    assert set(opened) == {"immutable"}  # a WAL database without its log: nothing opened


def test_concurrent_adds_on_a_read_only_history_both_say_so(tmp_path, monkeypatch):
    from conftest import start_cli

    db = _history_db(tmp_path)
    os.chmod(db, 0o444)
    os.chmod(db.parent, 0o555)
    try:
        if os.access(db, os.W_OK):
            pytest.skip("permissions do not bind here (root)")
        before = db.read_bytes()
        adders = [start_cli("add", _results(tmp_path, f"n{i}.json", start=f"n{i}"),
                            "--label", f"n{i}", "--db", db, module="param_compute.cli.history")
                  for i in range(2)]
        for adder in adders:
            out, err = adder.communicate(60)
            assert adder.returncode == 2 and "read-only" in err and out == "", err
        assert db.read_bytes() == before
    finally:
        os.chmod(db.parent, 0o755)
        os.chmod(db, 0o644)


# --- a full disk ------------------------------------------------------------------------------

def test_add_on_a_full_disk_is_one_line_and_the_history_as_it_was(tmp_path, monkeypatch):
    """SQLite ends a transaction itself when the disk fills (SQLITE_FULL); add then said
    "cannot rollback - no transaction is active". A database capped a few pages above its size
    (``max_page_count``) fills as a disk does, with SQLite's own error."""
    db = tmp_path / "h.db"
    assert history("add", _results(tmp_path), "--label", "v1", db=db).returncode == 0
    before = counts(db)
    big = write_results(tmp_path / "big.json", header(host="h2"),
                        [record(i, 1.0) for i in range(3000)])
    connect = backends._connect_sqlite

    def small_disk(path, mode):
        connection = connect(path, mode)
        if mode.startswith("rw"):
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count = {pages + 8}")
        return connection

    monkeypatch.setattr(backends, "_connect_sqlite", small_disk)
    done = history("add", big, "--label", "v2", db=db)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"error: {db}: the file system is full (the database says: "
                           f"database or disk is full); {big} not added (its add was rolled "
                           "back: the history is as it was before it)\n")
    monkeypatch.undo()
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    connection.close()
    assert counts(db) == before
    assert history("add", big, "--label", "v2", db=db).returncode == 0  # room again: it lands


def test_a_write_that_fails_midway_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    from param_compute.history import store as store_module

    db = tmp_path / "h.db"
    assert history("add", _results(tmp_path), "--label", "v1", db=db).returncode == 0
    before = counts(db)

    def broken(self, rows):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store_module.HistoryStore, "put_points", broken)
    done = history("add", _results(tmp_path, "s.json", start="s"), "--label", "v2", db=db)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "disk I/O error" in done.stderr and "not added (its add was rolled back" in \
        done.stderr
    monkeypatch.undo()
    assert counts(db) == before


# --- credentials and unreachable servers -------------------------------------------------------

@pytest.mark.parametrize("db, secrets, expected", [
    ("postgresql://me:hunter2@db/h", ["hunter2"], "postgresql://me:***@db/h"),
    ("postgresql://me@db/h?password=hunter2&sslmode=require",
     ["hunter2"], "postgresql://me@db/h?password=***&sslmode=require"),
    ("postgres://me@db/h?passfile=/home/me/.pgpass&sslpassword=k3y%20pw&sslkey=/k",
     ["/home/me/.pgpass", "k3y%20pw", "k3y pw", "/k"],
     "postgres://me@db/h?passfile=***&sslpassword=***&sslkey=***"),
    ("postgresql://a:b@h1:5432,h2:5433/h?Password=zz", ["zz"],
     "postgresql://a:***@h1:5432,h2:5433/h?Password=***"),
    ("host=db dbname=h user=me password='pw with spaces'", ["pw with spaces"],
     "host=db dbname=h user=me password=***"),
    ("host=db password=hunter2\nforged", ["hunter2"], None),
    ("postgresql://mé:pässwörd@hôst/dß?sslpassword=ключ", ["pässwörd", "ключ"],
     "postgresql://mé:***@hôst/dß?sslpassword=***"),
    ("postgresql://me:p%C3%A4ss%0Aword@h/db", ["p%C3%A4ss%0Aword", "päss\nword"],
     "postgresql://me:***@h/db"),
])
def test_every_credential_is_masked_wherever_the_database_is_named(db, secrets, expected):
    assert is_postgres(db) or "\n" in db
    said = shown(db)
    assert all(secret not in said for secret in secrets), said
    assert "\n" not in said
    if expected is not None:
        assert said == expected
    # a driver quoting the part it could not parse is scrubbed too
    for secret in secrets:
        assert secret not in scrubbed(f'invalid token: "{secret}" in {db}', db)


def test_a_path_is_no_connection_string_and_is_named_as_it_is():
    assert not is_postgres("history.db") and not is_postgres("dbname=h.db and more")
    assert shown("odd\nname.db") == "odd\\nname.db"


def test_a_url_password_never_reaches_the_message_and_a_bad_url_is_one_line(tmp_path):
    for url in ("postgresql://me@127.0.0.1:1/h?password=hunter2&connect_timeout=2",
                "postgresql://me:hunter2@127.0.0.1:1/h",
                "postgresql://me@h/db?password=hun%zzter2",
                "postgresql://[::1/x?password=hunter2",
                "host=127.0.0.1 port=1 dbname=h password=hunter2"):
        for args in (("show",), ("add", _results(tmp_path), "--label", "v")):
            done = history(*args, db=url)
            assert done.returncode == 2 and done.stdout == "", (url, done.stderr)
            assert "hunter2" not in done.stderr and "hun%zzter2" not in done.stderr, done.stderr
            assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.fixture
def silent_port():
    """A port on loopback that accepts connections and never answers (a server hung, a
    firewall that lets the handshake through): only a timeout ends a connection to it."""
    pytest.importorskip("psycopg")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def test_unreachable_hosts_fail_in_seconds_saying_the_timeout(silent_port):
    """Three hosts took 46 s to fail (15 s each); each now gets 3 s, unless the URL says."""
    url = (f"postgresql://me:hunter2@127.0.0.1:{silent_port},127.0.0.1:1,"
           f"127.0.0.1:{silent_port}/h?sslpassword=hunter3")
    start = time.monotonic()
    done = history("show", db=url)
    took = time.monotonic() - start
    assert took < 20, took  # two silent hosts at 3 s, one closed port at once
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: postgresql://me:***@127.0.0.1:{silent_port},127.0.0.1:1,127.0.0.1:"
        f"{silent_port}/h?sslpassword=***: cannot connect (3 hosts tried, each host given 3 s; "
        "connect_timeout=SECONDS in the URL gives more): connection timeout expired\n")
    start = time.monotonic()
    done = history("check", db=f"postgresql://me@127.0.0.1:{silent_port}/h?connect_timeout=2")
    assert time.monotonic() - start < 15
    assert done.returncode == 2 and "cannot connect (each host given connect_timeout=2 s)" in \
        done.stderr


# --- hostile databases -------------------------------------------------------------------------

def _damaged(tmp_path, *statements):
    db = tmp_path / "h.db"
    for index in range(1, 3):
        history("add", _results(tmp_path, f"r{index}.json", start=f"s{index}"), "--label",
                f"v{index}", db=db)
    with sqlite3.connect(db) as connection:
        for statement in statements:
            connection.execute(statement)
    connection.close()
    return db


@pytest.mark.parametrize("statements, said", [
    (["UPDATE series SET machine_id = 'abc' WHERE id = 1"], None),
    (["UPDATE labels SET name = printf('%.3000000c', 'x') WHERE id = 1"], None),
    (["UPDATE labels SET name = x'1b5b324a0a' WHERE id = 2"], None),
    (["UPDATE series SET op = printf('%.2000000c', 'y'), run_key = char(27) || '[2J'"], None),
    (["UPDATE points SET n = 'many', ci_low = 'x', ci_high = x'00'", "UPDATE points SET "
      "median = 1e300 WHERE label_id = 1"], None),
    (["UPDATE history_meta SET value = '²' WHERE key = 'schema_version'"],
     "damaged history database (schema_version '²' is not a number)"),
    (["UPDATE history_meta SET value = printf('%.5000d', 1) WHERE key = 'schema_version'"],
     "damaged history database (schema_version '000000000000000000000000000000000000000..."),
    (["CREATE TABLE \"evil\x1b[2J\" (x)", "DROP TABLE history_meta"],
     "no history_meta: evil\\x1b[2J, labels, machines, points, runs)"),
])
def test_a_hostile_database_is_read_bounded_without_a_traceback(tmp_path, statements, said):
    db = _damaged(tmp_path, *statements)
    for args in (("show",), ("check",), ("report", "-o", tmp_path / "site"),
                 ("add", _results(tmp_path, "n.json", start="n"), "--label", "v3")):
        done = history(*args, db=db)
        text = done.stdout + done.stderr
        assert "Traceback" not in text and "\x1b" not in text, text[-2000:]
        assert len(text) < 20_000, len(text)  # a 3 MB label or op name is never printed whole
        if said is not None:
            assert done.returncode == 2 and said in done.stderr, done.stderr
        else:
            assert done.returncode in (0, 1), (args, done.stderr)


def test_a_database_that_is_a_fifo_or_a_link_to_another_application_s_file(tmp_path):
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    for args in (("show",), ("add", _results(tmp_path), "--label", "v1")):
        done = history(*args, db=fifo)  # never waited on
        assert (done.returncode, done.stderr) == (2, f"error: {fifo}: is a FIFO, not a history "
                                                     "database (a regular SQLite file)\n")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE accounts (id INTEGER)")
    connection.close()
    before = foreign.read_bytes()
    link = tmp_path / "link.db"
    link.symlink_to(foreign)
    done = history("show", db=link)  # a reading command follows a link, and refuses it so
    assert done.returncode == 2 and "no history_meta: accounts" in done.stderr
    assert foreign.read_bytes() == before


def test_a_label_in_a_header_that_is_huge_or_forged(tmp_path):
    """A header's commit gives a label of its first 12 characters; one that is not printable
    (a forged line) is refused; --label takes 200 printable characters at most."""
    db = tmp_path / "h.db"
    huge = write_results(tmp_path / "g.json", header(git_commit="a" * 100_000), [record(0, 1.0)])
    done = history("add", huge, db=db)
    assert done.returncode == 0 and "added as aaaaaaaaaaaa on h1" in done.stdout, done.stderr
    forged = write_results(tmp_path / "f.json", header(git_commit="ok\nregression: x"),
                           [record(0, 1.0)])
    done = history("add", forged, db=db)
    assert (done.returncode, done.stderr) == (2, f"error: {forged}: the label its header gives "
                                                 "('ok\\nregressio') is not printable; give "
                                                 "the run a label (--label L)\n")
    done = history("add", forged, "--label", "b" * 100_000, db=db)
    assert (done.returncode, done.stderr) == (2, f"error: --label {'b' * 40!r}: at most 200 "
                                                 "printable characters\n")


# --- results files: units and garbled step lines ----------------------------------------------

def test_a_database_error_message_never_holds_the_url_s_secrets():
    error = RuntimeError("connection to 'postgresql://me:hunter2@db/h' failed\nsecond line")
    said = backends.explained(error, "postgresql://me:hunter2@db/h")
    assert said == "connection to 'postgresql://me:***@db/h' failed second line"


def test_json_of_a_header_declaring_microseconds_is_what_history_stores_in_ms(tmp_path):
    head = header()
    head["run_options"]["time_unit"] = "microsecond"
    rows = [record(0, 1500.0)]  # 1500 µs
    path = write_results(tmp_path / "us.json", head, rows)
    db = tmp_path / "h.db"
    done = history("add", path, "--label", "v1", db=db)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT median, ci_low, ci_high FROM points").fetchall() == [
            (1.5, pytest.approx(1.485), pytest.approx(1.515))]
    connection.close()
    assert "last 1.500 ms" in history("show", db=db).stdout
    assert json.loads(path.read_text().splitlines()[0])["run_options"]["time_unit"] == \
        "microsecond"  # the file itself is never rewritten
