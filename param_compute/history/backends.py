"""Connections to a history database: SQLite (the embedded default) or PostgreSQL, one dialect.

The store's SQL is written once, with ``?`` placeholders and portable types; a backend turns
it into its driver's form (``%s`` for psycopg), opens write transactions that one writer at a
time holds (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL advisory lock), and streams query rows
(a server-side cursor on PostgreSQL) so that reading a long history holds a batch at a time.

A database path is untrusted input: only a regular file is opened (a directory, FIFO or device
is refused, and ``add`` refuses a symbolic link, dangling or not). An existing file is read
before SQLite opens it (its header: an SQLite database, and no other application's
``application_id``), then opened read-only, and checked to be a history database (the
``verify`` given, ``schema.check``) before anything may write to it: another application's
database is never switched to WAL, migrated or touched. Reading commands keep a read-only
connection where the file or its folder cannot be written (a read-only mount); ``add`` says it
is read-only. SQLite runs with ``trusted_schema`` off, so a hostile file's views and triggers
cannot call functions with side effects, and a write transaction that SQLite ended itself (a
full disk) is not rolled back twice: the error said is the one that happened.

A PostgreSQL database is a ``postgresql://`` URL or a libpq ``key=value`` connection string;
every message names it through :func:`shown` (every credential masked: the URL's password,
``password``/``passfile``/``sslpassword``... parameters) and passes driver errors through
:func:`scrubbed`. Each host gets :data:`CONNECT_TIMEOUT` seconds unless the URL sets
``connect_timeout``, so an unreachable server fails in seconds, saying so.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple
from urllib.parse import unquote

from param_compute.files import LINK, MISSING, FileRefused, check_regular, read_head
from param_compute.formatting import printable

#: The default ``--db``: one SQLite file in the working directory.
DEFAULT_DB = "param_compute_history.db"
#: Pages of SQLite's write-ahead log between checkpoints (16384 pages of 4 KiB: 64 MiB).
WAL_CHECKPOINT_PAGES = 16384
#: Rows fetched per round trip when streaming.
STREAM_BATCH = 5000
#: The PostgreSQL advisory lock key that serializes writers (any constant of ours).
_PG_WRITE_LOCK = 0x7061_7261_6D00
#: SQLite's ``application_id`` of a history database (header bytes 68-71: "PCH1"); databases
#: made before it have 0, and are told by their ``history_meta``.
APPLICATION_ID = 0x5043_4831
#: Seconds each PostgreSQL host gets to answer, unless the URL sets ``connect_timeout``.
CONNECT_TIMEOUT = 3
#: How long a writer waits for another one (SQLite's busy timeout), in seconds.
BUSY_TIMEOUT = 60
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_HEADER = 100

#: libpq's connection parameters (a ``key=value`` string of only these is a PostgreSQL one).
_LIBPQ_KEYS = frozenset("""host hostaddr port dbname user password passfile require_auth
    channel_binding connect_timeout client_encoding options application_name
    fallback_application_name keepalives keepalives_idle keepalives_interval keepalives_count
    tcp_user_timeout replication gssencmode sslmode requiressl sslnegotiation sslcompression
    sslcert sslkey sslkeylogfile sslpassword sslcertmode sslrootcert sslcrl sslcrldir sslsni
    requirepeer ssl_min_protocol_version ssl_max_protocol_version min_protocol_version
    max_protocol_version krbsrvname gsslib gssdelegation service target_session_attrs
    load_balance_hosts oauth_issuer oauth_client_id oauth_client_secret oauth_scope""".split())
#: Parameters whose values are never shown: secrets, and where secrets are kept.
_SECRET_KEYS = frozenset({"password", "passfile", "sslpassword", "sslkey", "sslkeylogfile",
                          "oauth_client_secret"})
_SECRET_WORDS = ("pass", "secret", "token", "key")
_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)*)")
_MASK = "***"
#: A credential in text that is no connection string: ``password=VALUE`` (any secret key).
_LOOSE_SECRET = re.compile(r"(?i)\b((?:[a-z_]*(?:pass|secret|token)[a-z_]*|sslkey)\s*=\s*)"
                           r"('(?:[^'\\]|\\.)*'|[^\s&'#]+)")


class HistoryError(Exception):
    """A history database or input that cannot be used; the message says which and why."""


def _secret(key: str) -> bool:
    key = key.lower()
    return key in _SECRET_KEYS or any(word in key for word in _SECRET_WORDS)


def _conninfo(db: str) -> Optional[List[Tuple[str, str, Tuple[int, int]]]]:
    """The pairs of a libpq ``key=value`` connection string ((key, value, span of the value)),
    or None where ``db`` is not one (every key must be a libpq parameter)."""
    pairs, at, text = [], 0, str(db)
    while at < len(text):
        if not text[at:].strip():
            break
        match = _PAIR.match(text, at)
        if match is None or match.group(1) not in _LIBPQ_KEYS or match.end() == at:
            return None
        value = match.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs.append((match.group(1), value, match.span(2)))
        at = match.end()
    return pairs or None


def is_postgres(db: str) -> bool:
    """Whether ``--db`` names a PostgreSQL database: a ``postgresql://`` (``postgres://``)
    URL, or a libpq ``key=value`` string of libpq's parameters (``host=... dbname=...``)."""
    return str(db).startswith(("postgresql://", "postgres://")) or _conninfo(db) is not None


def _url_secrets(url: str) -> Tuple[str, List[str]]:
    """(the URL with its credentials masked, the secrets it held, as written and decoded)."""
    scheme, _, rest = url.partition("://")
    cut = min([i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0],
              default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    secrets: List[str] = []
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        user, _, password = userinfo.partition(":")
        secrets.append(password)
        netloc = f"{user}:{_MASK}@{hosts}"
    path, question, query = tail.partition("?")
    if question:
        query, hash_, fragment = query.partition("#")
        parts = []
        for part in query.split("&"):
            key, equals, value = part.partition("=")
            if equals and _secret(unquote(key)):
                secrets.append(value)
                part = f"{key}={_MASK}"
            parts.append(part)
        tail = f"{path}?{'&'.join(parts)}{hash_}{fragment}"
    return f"{scheme}://{netloc}{tail}", secrets


def _masked(db: str) -> Tuple[str, List[str]]:
    """(``db`` with every credential masked, the secrets it held). Anything else that looks
    like a credential (``password=...`` in a string that is neither a URL nor a connection
    string libpq reads) is masked too: a mistyped connection string is named as a path."""
    text = str(db)
    if text.startswith(("postgresql://", "postgres://")):
        shown_text, secrets = _url_secrets(text)
    else:
        pairs = _conninfo(text)
        secrets, shown_text, last = [], "", 0
        for key, value, (begin, end) in pairs or ():
            if _secret(key):
                secrets.append(value)
                shown_text += text[last:begin] + _MASK
                last = end
        shown_text += text[last:]
        if pairs is None:
            for match in _LOOSE_SECRET.finditer(text):
                secrets.append(match.group(2))
            shown_text = _LOOSE_SECRET.sub(lambda m: f"{m.group(1)}{_MASK}", text)
    decoded = [unquote(secret) for secret in secrets]
    return shown_text, [s for s in dict.fromkeys(secrets + decoded) if s]


def shown(db: Any) -> str:
    """A database as messages name it: every credential masked (``user:***@``,
    ``password=***``, ``sslpassword=***``...), control characters as escapes (a newline in it
    forges no line)."""
    return printable(_masked(str(db))[0], 500)


def scrubbed(text: Any, db: Any) -> str:
    """A driver's message about ``db`` without its secrets (a driver may quote the part of a
    URL it could not parse, password and all), on one line."""
    text = str(text)
    masked, secrets = _masked(str(db))
    text = text.replace(str(db), masked)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, _MASK)
        else:  # a short one only where it stands alone
            text = re.sub(rf"(?<![\w%]){re.escape(secret)}(?![\w%])", _MASK, text)
    return printable(" ".join(text.split()), 1000)


class Backend:
    """One open connection; subclasses give the driver's details. ``where``: the database as
    messages name it (:func:`shown`); ``path``: an SQLite database's file; ``read_only``: a
    connection that cannot write (a read-only file, folder or mount)."""

    kind = ""

    def __init__(self, where: str, connection: Any, path: Optional[Path] = None,
                 read_only: bool = False):
        self.where = where
        self.connection = connection
        self.path = path
        self.read_only = read_only

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

    def stamp(self) -> None:
        """Mark a database being created as ours where the format has a place for it."""

    def tables(self) -> List[str]:
        raise NotImplementedError

    def close(self) -> None:
        self.connection.close()


class SQLiteBackend(Backend):
    kind = "sqlite"

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """A write transaction: taken before the first read, so writers queue (the busy
        timeout) instead of failing; rolled back on any exception, a kill leaves nothing. A
        transaction SQLite already rolled back itself (a full disk, an I/O error) is not
        rolled back again: the error raised is the one that happened."""
        import sqlite3

        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.connection.execute("COMMIT")
        except BaseException:
            if self.connection.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the first error is the one to say
                    self.connection.execute("ROLLBACK")
            raise

    def stamp(self) -> None:
        self.connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")

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


#: ``verify(backend)``: raises :class:`HistoryError` unless the database is a history one
#: (or, for ``add``, empty); ``schema.check`` with the command's ``create``.
Verify = Callable[[Backend], None]


def _connect_sqlite(path: Path, mode: str):
    """An SQLite connection to ``path``: ``mode`` ``rwc`` (read and write, created where
    missing), ``rw``, ``ro`` (read-only) or ``immutable`` (read-only, nothing beside the file
    opened or created: a WAL database with no log, or a read-only folder)."""
    import sqlite3

    query = "mode=ro&immutable=1" if mode == "immutable" else f"mode={mode}"
    connection = sqlite3.connect(f"{path.absolute().as_uri()}?{query}", uri=True,
                                 timeout=BUSY_TIMEOUT, isolation_level=None)
    try:
        connection.execute("PRAGMA trusted_schema = OFF")
    except BaseException:
        connection.close()
        raise
    return connection


def _writable(path: Path) -> bool:
    """Whether ``add`` can write the database at ``path``: the file (where it exists) and its
    folder (SQLite writes its log and shared memory beside it)."""
    folder = path.absolute().parent
    return os.access(folder, os.W_OK | os.X_OK) and (
        not os.path.lexists(path) or os.access(path, os.W_OK))


def _sqlite_header(path: Path, where: str, refused) -> bool:
    """Check an existing file's header before SQLite opens it: an SQLite database, and not
    another application's (its ``application_id``). Whether it is in WAL mode."""
    head = read_head(path, _SQLITE_HEADER, error=refused)
    if not head:
        return False  # an empty file: an empty database
    if len(head) < _SQLITE_HEADER or not head.startswith(_SQLITE_MAGIC):
        raise HistoryError(f"{where}: not a history database (not an SQLite database: its "
                           "first bytes are not SQLite's header)")
    application = int.from_bytes(head[68:72], "big")
    if application not in (0, APPLICATION_ID):
        raise HistoryError(f"{where}: not a history database (another application's SQLite "
                           f"database: application_id {application:#010x})")
    return head[18] == 2 or head[19] == 2  # the read and write versions: 2 is WAL


def _verified(path: Path, mode: str, where: str, verify: Optional[Verify],
              read_only: bool) -> SQLiteBackend:
    """A backend on ``path`` opened in ``mode``, once ``verify`` says the database is ours;
    closed again otherwise."""
    import sqlite3

    connection = _connect_sqlite(path, mode)
    backend = SQLiteBackend(where, connection, path, read_only)
    try:
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if verify is not None:
            verify(backend)
    except sqlite3.OperationalError:  # a lock, a folder it cannot open: no verdict on the file
        connection.close()
        raise
    except sqlite3.DatabaseError as exc:  # not a database, or a malformed one
        connection.close()
        raise HistoryError(f"{where}: not a history database (SQLite says: "
                           f"{printable(exc)})") from None
    except BaseException:
        connection.close()
        raise
    return backend


def _read_only(path: Path, wal: bool, where: str, verify: Optional[Verify]) -> SQLiteBackend:
    """A read-only backend on an existing file, checked by ``verify``: ``mode=ro`` (which
    honours other connections' locks and log), or ``immutable`` where that cannot open it (a
    read-only folder, where the shared memory of a WAL database cannot be made) or where a WAL
    database has no log beside it (nothing to read from one, nothing made beside it)."""
    import sqlite3

    if wal and not os.path.lexists(f"{path}-wal"):
        return _verified(path, "immutable", where, verify, True)
    try:
        return _verified(path, "ro", where, verify, True)
    except sqlite3.OperationalError as exc:
        if "unable to open" not in str(exc) and "readonly" not in str(exc):
            raise
        return _verified(path, "immutable", where, verify, True)


def _open_sqlite(path: Path, create: bool, verify: Optional[Verify]) -> SQLiteBackend:
    import sqlite3

    where = shown(path)

    def refused(refusal: FileRefused) -> HistoryError:
        if refusal.code == LINK:
            return HistoryError(f"{where}: is a symbolic link; give the database's own path "
                                "(add never writes through a link)")
        if refusal.code == MISSING:
            return HistoryError(f"{where}: no history database here (python -m "
                                "param_compute.history add RESULTS.json creates one)")
        if refusal.kind is not None:
            return HistoryError(f"{where}: is {refusal.kind}, not a history database (a "
                                "regular SQLite file)")
        return HistoryError(f"{where}: {printable(refusal.reason)}")

    # the driver opens it: checked here (a dangling link is a link, refused by add too)
    found = check_regular(path, follow_links=not create, missing_ok=create, error=refused)
    writable = _writable(path)
    try:
        if found is not None:  # read before anything may write to it
            wal = _sqlite_header(path, where, refused)
            _read_only(path, wal, where, verify).close()
            if not writable:
                if create:
                    raise HistoryError(
                        f"{where}: read-only (the file or its folder cannot be written): "
                        "nothing added; show, check and report read it as it is")
                return _read_only(path, wal, where, verify)
        # ours (or new, or empty): opened for writing, checked again before the first write
        backend = _verified(path, "rwc" if create else "rw", where, verify, False)
        try:
            connection = backend.connection
            if create:
                connection.execute("PRAGMA journal_mode = WAL")
                # an add rewrites a page of the points' index per series: checkpoint the log
                # every 64 MB, not every 4 MB (each add would copy back and sync ~4 MB again)
                connection.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
            connection.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            backend.close()
            raise
        return backend
    except sqlite3.Error as exc:
        raise HistoryError(f"{where}: {explained(exc)}") from None


def _open_postgres(url: str, verify: Optional[Verify]) -> PostgresBackend:
    where = shown(url)
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise HistoryError(f"{where}: PostgreSQL needs the psycopg driver (pip install "
                           "'param_compute[postgres]')") from None
    try:
        given = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise HistoryError(f"{where}: not a PostgreSQL URL or connection string: "
                           f"{scrubbed(exc, url)}") from None
    timeout: Dict[str, Any] = {}
    if given.get("connect_timeout") is None:
        timeout["connect_timeout"] = CONNECT_TIMEOUT
        waited = f"each host given {CONNECT_TIMEOUT} s; connect_timeout=SECONDS in the URL " \
                 "gives more"
    else:
        waited = f"each host given connect_timeout={printable(given['connect_timeout'], 20)} s"
    hosts = len(str(given.get("host") or given.get("hostaddr") or "").split(","))
    try:
        connection = psycopg.connect(url, autocommit=True, **timeout)
    except psycopg.Error as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        tried = f"{hosts} hosts tried, " if hosts > 1 else ""
        raise HistoryError(f"{where}: cannot connect ({tried}{waited}): "
                           f"{scrubbed(lines[0] if lines else type(exc).__name__, url)}"
                           ) from None
    backend = PostgresBackend(where, connection)
    try:
        if verify is not None:
            verify(backend)
    except BaseException:
        backend.close()
        raise
    return backend


def connect(db: str, create: bool = False, verify: Optional[Verify] = None) -> Backend:
    """The backend for ``--db``: a PostgreSQL URL or connection string, else an SQLite file
    path (created when ``create``, else it must exist). ``verify`` checks the database is a
    history database before anything may write to it (see the module's doc)."""
    if is_postgres(db):
        return _open_postgres(str(db), verify)
    return _open_sqlite(Path(db), create, verify)


def driver_errors() -> Tuple[type, ...]:
    """The database errors a command turns into a message (whichever drivers are loaded)."""
    import sqlite3
    import sys

    errors: List[type] = [sqlite3.Error]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.Error)
    return tuple(errors)


def explained(exc: BaseException, db: Any = "") -> str:
    """A database error in words, on one line, without secrets: what happened (a full disk,
    a read-only file, a lock held too long) and the driver's own words."""
    said = scrubbed(exc, db)
    sqlstate = str(getattr(exc, "sqlstate", "") or "")
    if "database or disk is full" in said or sqlstate.startswith("53"):
        return f"the file system is full (the database says: {said})"
    if "readonly" in said or "read-only" in said:
        return f"read-only: the history database cannot be written (the database says: {said})"
    if "database is locked" in said:
        return (f"locked: another writer held it for {BUSY_TIMEOUT} s (the database says: "
                f"{said})")
    return said
