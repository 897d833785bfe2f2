"""Connections to a history database: SQLite (the embedded default) or PostgreSQL, one dialect.

The store's SQL is written once, with ``?`` placeholders and portable types; a backend turns
it into its driver's form (``%s`` for psycopg), opens write transactions that one writer at a
time holds (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL advisory lock), and streams query rows
(a server-side cursor on PostgreSQL) so that reading a long history holds a batch at a time.

A database path is untrusted input: only a regular file is opened (a directory, FIFO or device
is refused, and ``add`` refuses a symbolic link, dangling or not), a file that is no
SQLite database is named as such, and SQLite runs with
``trusted_schema`` off, so a hostile file's views and triggers cannot call functions with side
effects.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit, urlunsplit

from param_compute.files import LINK, MISSING, FileRefused, check_regular
#: The default ``--db``: one SQLite file in the working directory.
DEFAULT_DB = "param_compute_history.db"
#: Pages of SQLite's write-ahead log between checkpoints (16384 pages of 4 KiB: 64 MiB).
WAL_CHECKPOINT_PAGES = 16384
#: Rows fetched per round trip when streaming.
STREAM_BATCH = 5000
#: The PostgreSQL advisory lock key that serializes writers (any constant of ours).
_PG_WRITE_LOCK = 0x7061_7261_6D00


class HistoryError(Exception):
    """A history database or input that cannot be used; the message says which and why."""


def is_postgres(db: str) -> bool:
    return str(db).startswith(("postgresql://", "postgres://"))


def shown(db: str) -> str:
    """A database as messages name it: a PostgreSQL URL without its password."""
    if not is_postgres(db):
        return str(db)
    parts = urlsplit(str(db))
    if parts.password is None:
        return str(db)
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class Backend:
    """One open connection; subclasses give the driver's details."""

    kind = ""

    def __init__(self, where: str, connection: Any):
        self.where = where
        self.connection = connection

    def sql(self, text: str) -> str:
        return text

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        return self.connection.execute(self.sql(text), tuple(params))

    def query(self, text: str, params: Sequence[Any] = ()) -> List[Tuple]:
        return list(self.execute(text, params).fetchall())

    def one(self, text: str, params: Sequence[Any] = ()) -> Optional[Tuple]:
        return self.execute(text, params).fetchone()

    def executemany(self, text: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            self.connection.cursor().executemany(self.sql(text), rows)

    def stream(self, text: str, params: Sequence[Any] = ()) -> Iterator[Tuple]:
        cursor = self.execute(text, params)
        while True:
            rows = cursor.fetchmany(STREAM_BATCH)
            if not rows:
                return
            yield from rows

    def write(self):
        raise NotImplementedError

    def tables(self) -> List[str]:
        raise NotImplementedError

    def close(self) -> None:
        self.connection.close()


class SQLiteBackend(Backend):
    kind = "sqlite"

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """A write transaction: taken before the first read, so writers queue (the busy
        timeout) instead of failing; rolled back on any exception, a kill leaves nothing."""
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    def tables(self) -> List[str]:
        return [row[0] for row in self.query(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]


class PostgresBackend(Backend):
    kind = "postgresql"
    _cursors = 0

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        with self.connection.transaction():
            self.connection.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_WRITE_LOCK,))
            yield

    def stream(self, text: str, params: Sequence[Any] = ()) -> Iterator[Tuple]:
        with self.connection.transaction():
            PostgresBackend._cursors += 1
            with self.connection.cursor(name=f"history_{PostgresBackend._cursors}") as cursor:
                cursor.itersize = STREAM_BATCH
                cursor.execute(self.sql(text), tuple(params))
                yield from cursor

    def tables(self) -> List[str]:
        return [row[0] for row in self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema()")]


def _open_sqlite(path: Path, create: bool) -> SQLiteBackend:
    import sqlite3

    def refused(refusal: FileRefused) -> HistoryError:
        if refusal.code == LINK:
            return HistoryError(f"{path}: is a symbolic link; give the database's own path "
                                "(add never writes through a link)")
        if refusal.code == MISSING:
            return HistoryError(f"{path}: no history database here (python -m "
                                "param_compute.history add RESULTS.json creates one)")
        if refusal.kind is not None:
            return HistoryError(f"{path}: is {refusal.kind}, not a history database (a "
                                "regular SQLite file)")
        return HistoryError(str(refusal))

    # the driver opens it: checked here (a dangling link is a link, refused by add too)
    check_regular(path, follow_links=not create, missing_ok=create, error=refused)
    try:
        connection = sqlite3.connect(str(path), timeout=60, isolation_level=None)
        connection.execute("PRAGMA trusted_schema = OFF")
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if create:
            connection.execute("PRAGMA journal_mode = WAL")
            # an add rewrites a page of the points' index per series: checkpoint the log
            # every 64 MB, not every 4 MB (each add would copy back and sync ~4 MB again)
            connection.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        connection.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: not a history database (SQLite says: {exc})") from None
    return SQLiteBackend(str(path), connection)


def _open_postgres(url: str, create: bool) -> PostgresBackend:
    try:
        import psycopg
    except ImportError:
        raise HistoryError(f"{shown(url)}: PostgreSQL needs the psycopg driver (pip install "
                           "'param_compute[postgres]')") from None
    try:
        connection = psycopg.connect(url, autocommit=True, connect_timeout=15)
    except psycopg.Error as exc:
        raise HistoryError(f"{shown(url)}: cannot connect: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}"
                           ) from None
    return PostgresBackend(shown(url), connection)


def connect(db: str, create: bool = False) -> Backend:
    """The backend for ``--db``: a ``postgresql://`` URL, else an SQLite file path (created
    when ``create``, else it must exist)."""
    if is_postgres(db):
        return _open_postgres(str(db), create)
    return _open_sqlite(Path(db), create)


def driver_errors() -> Tuple[type, ...]:
    """The database errors a command turns into a message (whichever drivers are loaded)."""
    import sqlite3
    import sys

    errors: List[type] = [sqlite3.Error]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.Error)
    return tuple(errors)
