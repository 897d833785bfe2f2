"""The history database's tables, their version, and the check that a database is one of ours.

One schema for SQLite and PostgreSQL (portable types; ids are given by the store, never by an
auto-increment of either dialect):

* ``history_meta``: ``app`` (``param_compute.history``) and ``schema_version``;
* ``machines``: one row per machine identity (host, device, threads, torch, peaks
  fingerprint), ``fingerprint`` the hash of those facts;
* ``labels``: the labels (commits, versions, ``--label``), ``id`` in the order first added;
* ``runs``: one row per ingested results file, ``content_hash`` its identity (the same file
  twice adds nothing), with its label and machine;
* ``series``: one row per (machine, op, config, pass) (``kind`` ``op``, or ``step`` for a
  captured workload's step total);
* ``points``: one median with its interval per (series, label), the latest run's.
"""

from __future__ import annotations

import re
from typing import List

from param_compute.formatting import printable
from param_compute.history.backends import Backend, HistoryError, driver_errors

APP = "param_compute.history"
SCHEMA_VERSION = 1

TABLES = ("history_meta", "machines", "labels", "runs", "series", "points")

DDL: List[str] = [
    "CREATE TABLE history_meta (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE machines (id INTEGER PRIMARY KEY, fingerprint VARCHAR(64) NOT NULL UNIQUE, "
    "name TEXT NOT NULL, host TEXT, device TEXT, threads INTEGER, torch TEXT, peaks TEXT, "
    "facts TEXT)",
    "CREATE TABLE labels (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, added TEXT)",
    "CREATE TABLE runs (id INTEGER PRIMARY KEY, content_hash VARCHAR(64) NOT NULL UNIQUE, "
    "label_id INTEGER NOT NULL REFERENCES labels (id), "
    "machine_id INTEGER NOT NULL REFERENCES machines (id), path TEXT, start_time TEXT, "
    "added TEXT, records INTEGER, skipped INTEGER)",
    "CREATE TABLE series (id INTEGER PRIMARY KEY, "
    "machine_id INTEGER NOT NULL REFERENCES machines (id), op TEXT NOT NULL, "
    "config_key VARCHAR(64) NOT NULL, pass VARCHAR(64) NOT NULL, kind VARCHAR(16) NOT NULL, "
    "run_key TEXT, config TEXT, UNIQUE (machine_id, config_key, pass, op))",
    "CREATE TABLE points (series_id INTEGER NOT NULL REFERENCES series (id), "
    "label_id INTEGER NOT NULL REFERENCES labels (id), "
    "run_id INTEGER NOT NULL REFERENCES runs (id), median DOUBLE PRECISION NOT NULL, "
    "ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, n INTEGER, "
    "PRIMARY KEY (series_id, label_id))",
    "CREATE INDEX points_by_label ON points (label_id)",
    "CREATE INDEX series_by_op ON series (op)",
]


def check(backend: Backend, create: bool = False) -> None:
    """Check, reading only, that ``backend`` holds a history database of this version (with
    ``create``: or an empty one, to be made one). :class:`HistoryError` otherwise: a database
    of something else, of a newer version, or (without ``create``) an empty one. What
    ``backends.connect`` runs on a read-only connection before anything may write."""
    tables = set(backend.tables())
    if not tables:
        if not create:
            raise HistoryError(f"{backend.where}: an empty database, no history yet (python -m "
                               "param_compute.history add RESULTS.json fills it)")
        return
    _check(backend, tables)


def ensure(backend: Backend, create: bool) -> None:
    """:func:`check`; with ``create``, an empty database gets the schema (in one transaction,
    marked as ours: SQLite's ``application_id``)."""
    check(backend, create)
    if backend.tables():
        return
    with backend.write():
        if backend.tables():  # another writer created it meanwhile
            return _check(backend, set(backend.tables()))
        backend.stamp()
        for statement in DDL:
            backend.execute(statement)
        backend.executemany("INSERT INTO history_meta (key, value) VALUES (?, ?)",
                            [("app", APP), ("schema_version", str(SCHEMA_VERSION))])


def _check(backend: Backend, tables: set) -> None:
    """The verdict on a database that has tables (read only, bounded: a hostile file's names
    and values are shown shortened and escaped, never whole)."""
    if "history_meta" not in tables:
        names = ", ".join(printable(name, 40) for name in sorted(map(str, tables))[:5])
        raise HistoryError(f"{backend.where}: not a param_compute history database (it has "
                           f"tables, but no history_meta: {names})")
    meta = {}
    try:
        rows = backend.query("SELECT key, substr(value, 1, 100) FROM history_meta WHERE key IN "
                             "('app', 'schema_version') LIMIT 4")
    except driver_errors() as exc:  # a table of that name, but not ours
        if "column" not in str(exc):  # a lock or a lost connection says nothing of the schema
            raise
        raise HistoryError(f"{backend.where}: not a param_compute history database "
                           f"(history_meta unreadable: {printable(exc, 200)})") from None
    for key, value in rows:
        meta[str(key)] = str(value)
    if meta.get("app") != APP:
        raise HistoryError(f"{backend.where}: not a param_compute history database "
                           f"(history_meta.app is {printable(repr(meta.get('app')), 60)})")
    version = meta.get("schema_version", "")
    if not re.fullmatch(r"[0-9]{1,9}", version):
        raise HistoryError(f"{backend.where}: damaged history database (schema_version "
                           f"{printable(repr(version), 40)} is not a number)")
    if int(version) > SCHEMA_VERSION:
        raise HistoryError(f"{backend.where}: written by a newer param_compute (schema "
                           f"{version}; this one reads {SCHEMA_VERSION})")
    missing = [name for name in TABLES if name not in tables]
    if missing:
        raise HistoryError(f"{backend.where}: damaged history database (no table "
                           f"{', '.join(missing)})")
