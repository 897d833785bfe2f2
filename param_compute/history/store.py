"""The history store: the reads and writes of the history tables, through one backend.

Writes happen inside :meth:`HistoryStore.write` (one transaction, one writer at a time), in
batches (``executemany``); reads of points stream in series order (the points' primary key),
so memory follows one series, not the history. Ids are the store's: ``MAX(id) + 1`` under the
write lock, which keeps label ids in the order labels were first added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from param_compute.history.backends import Backend, HistoryError, connect
from param_compute.history.identity import Machine
from param_compute.history.schema import check, ensure
from param_compute.results.fields import measured

#: A series' identity within a machine: (op, config key, pass).
SeriesKey = Tuple[str, str, str]
#: The most characters of a name (label, machine, op, config) read back: ingest writes less,
#: a hostile or damaged database's longer names are cut (never held or printed whole).
MAX_TEXT = 1000


@dataclass(frozen=True)
class MachineRow:
    id: int
    name: str
    fingerprint: str


@dataclass(frozen=True)
class SeriesInfo:
    """What the store says of a series besides its points."""

    id: int
    machine_id: int
    op: str
    config_key: str
    pass_name: str
    kind: str
    run_key: str
    config: str


def _id(value: Any) -> Optional[int]:
    """An id read from the database (its columns are untrusted): a whole number, else None."""
    return value if type(value) is int else None  # noqa: E721


def _number(value: Any) -> Optional[float]:
    """A time read from the database (its columns are untrusted): a number from 0 to
    ``results.fields.MAX_NUMBER`` ms, as ingest keeps them, else None."""
    return measured(value) if type(value) in (float, int) else None  # noqa: E721


class HistoryStore:
    """An open history database (``HistoryStore.open(db)``); a context manager."""

    def __init__(self, backend: Backend):
        self.backend = backend

    @classmethod
    def open(cls, db: str, create: bool = False) -> "HistoryStore":
        backend = connect(db, create, lambda opened: check(opened, create))
        try:
            ensure(backend, create)
        except BaseException:
            backend.close()
            raise
        return cls(backend)

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.backend.close()

    @property
    def where(self) -> str:
        return self.backend.where

    def write(self):
        return self.backend.write()

    # --- writing (inside write()) ----------------------------------------------------------

    def _next_id(self, table: str) -> int:
        row = self.backend.one(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}")
        return int(row[0])

    def machine_id(self, machine: Machine) -> int:
        row = self.backend.one("SELECT id FROM machines WHERE fingerprint = ?",
                               (machine.fingerprint,))
        if row:
            return int(row[0])
        new = self._next_id("machines")
        self.backend.execute(
            "INSERT INTO machines (id, fingerprint, name, host, device, threads, torch, peaks, "
            "facts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (new, machine.fingerprint, machine.name, machine.host, machine.device,
             machine.threads, machine.torch, machine.peaks, machine.facts()))
        return new

    def label_id(self, name: str, added: str) -> int:
        row = self.backend.one("SELECT id FROM labels WHERE name = ?", (name,))
        if row:
            return int(row[0])
        new = self._next_id("labels")
        self.backend.execute("INSERT INTO labels (id, name, added) VALUES (?, ?, ?)",
                             (new, name, added))
        return new

    def run_with_hash(self, content_hash: str) -> Optional[Tuple[int, str, str]]:
        """(run id, label, path) of the run already ingested with this content, or None."""
        row = self.backend.one(
            "SELECT runs.id, labels.name, runs.path FROM runs JOIN labels ON labels.id = "
            "runs.label_id WHERE runs.content_hash = ?", (content_hash,))
        return (int(row[0]), str(row[1]), str(row[2])) if row else None

    def add_run(self, content_hash: str, label_id: int, machine_id: int, path: str,
                start_time: Optional[str], added: str) -> int:
        new = self._next_id("runs")
        self.backend.execute(
            "INSERT INTO runs (id, content_hash, label_id, machine_id, path, start_time, added, "
            "records, skipped) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0)",
            (new, content_hash, label_id, machine_id, path, start_time, added))
        return new

    def finish_run(self, run_id: int, records: int, skipped: int) -> None:
        self.backend.execute("UPDATE runs SET records = ?, skipped = ? WHERE id = ?",
                             (records, skipped, run_id))

    def series_ids(self, machine_id: int, wanted: Dict[SeriesKey, Tuple[str, str, Any]],
                   shown: Callable[[Any], str] = str) -> Dict[SeriesKey, int]:
        """Ids of the series ``wanted`` ({(op, config key, pass): (kind, run key, config)})
        of a machine, creating those that are new (with the run key and ``shown(config)``)."""
        found: Dict[SeriesKey, int] = {}
        keys = sorted({key[1] for key in wanted})
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            for row in self.backend.query(
                    "SELECT id, op, config_key, pass FROM series WHERE machine_id = ? AND "
                    f"config_key IN ({marks})", (machine_id, *chunk)):
                key = (str(row[1]), str(row[2]), str(row[3]))
                if key in wanted:
                    found[key] = int(row[0])
        new_rows = []
        next_id = None
        for key, (kind, run_key, config) in wanted.items():
            if key in found:
                continue
            if next_id is None:
                next_id = self._next_id("series")
            found[key] = next_id
            new_rows.append((next_id, machine_id, key[0], key[1], key[2], kind, run_key,
                             shown(config)))
            next_id += 1
        self.backend.executemany(
            "INSERT INTO series (id, machine_id, op, config_key, pass, kind, run_key, config) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", new_rows)
        return found

    def put_points(self, rows: Iterable[Sequence[Any]]) -> None:
        """Points (series id, label id, run id, median, ci low, ci high, n): a label's point
        of a series already there is replaced (the latest run of a label counts)."""
        self.backend.executemany(
            "INSERT INTO points (series_id, label_id, run_id, median, ci_low, ci_high, n) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (series_id, label_id) DO UPDATE SET "
            "run_id = excluded.run_id, median = excluded.median, ci_low = excluded.ci_low, "
            "ci_high = excluded.ci_high, n = excluded.n", rows)

    # --- reading -----------------------------------------------------------------------------

    def labels(self) -> List[Tuple[int, str]]:
        """(id, name) of every label, in the order they were first added (a row of a damaged
        database whose id is no whole number left out)."""
        return [(i, str(name)) for i, name in
                ((_id(i), name) for i, name in self.backend.query(
                    f"SELECT id, substr(name, 1, {MAX_TEXT}) FROM labels ORDER BY id"))
                if i is not None]

    def machines(self) -> List[MachineRow]:
        return [MachineRow(_id(i), str(name), str(fp)) for i, name, fp in
                self.backend.query(f"SELECT id, substr(name, 1, {MAX_TEXT}), "
                                   f"substr(fingerprint, 1, {MAX_TEXT}) FROM machines "
                                   "ORDER BY id") if _id(i) is not None]

    def counts(self) -> Dict[str, int]:
        return {table: int(self.backend.one(f"SELECT COUNT(*) FROM {table}")[0])
                for table in ("machines", "labels", "runs", "series", "points")}

    def series(self) -> Dict[int, SeriesInfo]:
        """Every series by id (what a read of the points names them by); a row of a damaged
        database whose ids are no whole numbers is left out."""
        return {row[0]: SeriesInfo(row[0], row[1], str(row[2]), str(row[3]), str(row[4]),
                                   str(row[5]), str(row[6] or ""), str(row[7] or ""))
                for row in ((_id(row[0]), _id(row[1]), *row[2:]) for row in self.backend.stream(
                    f"SELECT id, machine_id, substr(op, 1, {MAX_TEXT}), "
                    f"substr(config_key, 1, 64), substr(pass, 1, {MAX_TEXT}), "
                    f"substr(kind, 1, 16), substr(run_key, 1, {MAX_TEXT}), "
                    f"substr(config, 1, {MAX_TEXT}) FROM series"))
                if row[0] is not None and row[1] is not None}

    def series_points(self, mixed: bool = False) -> Iterator[Tuple[SeriesInfo, int, float,
                                                                   Optional[float],
                                                                   Optional[float],
                                                                   Optional[int]]]:
        """(series, label id, median, ci low, ci high, n) of every point, by series then label
        (one streamed query in the points' primary key order); a point whose median is no
        finite number (a damaged database) is left out. ``mixed``: by (op, config, pass)
        then label, the series of every machine together."""
        infos = self.series()
        if mixed:
            query = ("SELECT p.series_id, p.label_id, p.median, p.ci_low, p.ci_high, p.n "
                     "FROM points p JOIN series s ON s.id = p.series_id ORDER BY s.op, "
                     "s.config_key, s.pass, p.label_id, s.machine_id")
        else:
            query = ("SELECT series_id, label_id, median, ci_low, ci_high, n FROM points "
                     "ORDER BY series_id, label_id")
        info: Optional[SeriesInfo] = None
        for series_id, label_id, median, low, high, n in self.backend.stream(query):
            median = _number(median)
            if median is None or median <= 0:  # no time (as ingest never stores one)
                continue
            if info is None or info.id != series_id:
                info = infos.get(series_id)
                if info is None:  # a damaged database: a point of no series
                    continue
            yield (info, label_id, median, _number(low), _number(high),
                   n if type(n) is int else None)  # noqa: E721


def open_store(db: str, create: bool = False) -> HistoryStore:
    """:meth:`HistoryStore.open`, database errors of the driver turned into HistoryError."""
    from param_compute.history.backends import driver_errors, explained, shown

    try:
        return HistoryStore.open(db, create)
    except driver_errors() as exc:
        raise HistoryError(f"{shown(db)}: {explained(exc, db)}") from None
