"""``--repetitions N``: the whole plan measured N times, each time in a fresh process and in a
seeded random order of its runs, combined into one record per run.

One long run hides the variance between processes (where the allocator put the tensors, which
core and frequency the process got); repetitions expose it, as Google Benchmark's
``--benchmark_repetitions`` with random interleaving does. Repetition ``r`` (0-based) runs the
selected runs in the order :func:`repetition_order` gives for ``(seed, r)``: different each
repetition, the same for the same ``--seed``. Each repetition gets a fresh worker process
(``isolation.IsolatedExecutor``; a crash becomes an error record, as with ``--isolate``).

A run's record is made from its N records by the one rule that also joins ``ab``'s rounds
(``results.combine``): every sample kept, the median and its interval across repetitions. A
run interrupted by a signal first writes the runs measured so far (records of the repetitions
that reached them), then stops as asked.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import signal
from typing import Callable, Dict, List, Optional, Sequence

from param_compute.plan.runkey import join_fields
from param_compute.plan.runplan import PlannedRun
from param_compute.process.signals import GUARD, Interrupted
from param_compute.results.combine import combine
from param_compute.results.records import RunRecord

log = logging.getLogger("param_compute")


def repetition_order(runs: Sequence[PlannedRun], seed: int, repetition: int) -> List[PlannedRun]:
    """``runs`` shuffled by a generator seeded from ``seed`` and the repetition's index."""
    order = list(runs)
    random.Random(join_fields("param_compute", "repetition", seed, repetition)).shuffle(order)
    return order


class RepeatedExecutor:
    """The engine's executor for ``--repetitions``: on the first ``execute`` it measures every
    selected run ``count`` times (each repetition by a fresh executor from ``fresh``, in its
    seeded order); each ``execute`` then returns the run's combined record."""

    def __init__(self, fresh: Callable[[], object], runs: Sequence[PlannedRun], count: int,
                 seed: int, canary: Optional[object] = None, keep: Optional[int] = None,
                 journal: Optional[object] = None):
        """``journal``: a ``repetition_journal.RepetitionJournal`` keeping each measurement on
        disk as it comes (what an earlier, killed attempt measured is not measured again)."""
        self.fresh = fresh
        self.journal = journal
        self._handed: set = set()  # runs whose combined record went to the engine
        self.keep = keep  # --keep-samples: the most samples a combined pass holds
        self.runs = list(runs)
        self.count = count
        self.seed = seed
        #: ``measure.canary.Canary`` read in this process before and after each repetition
        #: (None: ``--no-canary``); a drift outside its band marks that repetition's records.
        self.canary = canary
        self.repetition_drifts: List[Optional[float]] = []
        self.records: Dict[str, List[RunRecord]] = {}
        self.orders: List[List[str]] = []
        self.stop: Optional[BaseException] = None  # the signal that ended the measuring
        self._last: Optional[str] = None

    def measure(self) -> None:
        for repetition in range(self.count):
            order = repetition_order(self.runs, self.seed, repetition)
            self.orders.append([run.key for run in order])
            log.info("repetition %d of %d: %d runs in a fresh process, in a seeded random order",
                     repetition + 1, self.count, len(order))
            done = self.journal.done.get(repetition, {}) if self.journal is not None else {}
            todo = [run for run in order if run.key not in done]
            for run in order:  # measured by an earlier attempt, in the journal
                if run.key in done:  # under the plan's config, not the file's
                    self.records.setdefault(run.key, []).append(
                        dataclasses.replace(done[run.key], config=run.config()))
            if not todo:
                self.repetition_drifts.append(self.journal.drifts.get(repetition))
                continue
            before = self._canary_drift()
            measured: List[RunRecord] = []
            executor = self.fresh()
            try:
                for run in todo:
                    record = executor.execute(run)
                    self.records.setdefault(run.key, []).append(record)
                    measured.append(record)
                    if self.journal is not None:
                        self.journal.measured(repetition, run.key, record)
                self._mark(measured, before, self._canary_drift())
                if self.journal is not None:
                    self.journal.ended(repetition, self.repetition_drifts[-1])
            except (KeyboardInterrupt, Interrupted) as stop:
                self.stop = stop
                log.warning("interrupted in repetition %d of %d: the runs measured so far are "
                            "written first", repetition + 1, self.count)
                return
            finally:
                executor.close()

    def _canary_drift(self) -> Optional[float]:
        """A canary reading in this process (idle while a worker measures, the same process
        for every repetition, so its readings compare across them): the drift from the
        baseline when outside the band. The first call takes the baseline."""
        if self.canary is None:
            return None
        if self.canary.baseline is None:
            self.canary.start()
            return None
        return self.canary.check()

    def _mark(self, records: List[RunRecord], before: Optional[float],
              after: Optional[float]) -> None:
        """A repetition whose canary readings (before, after) drifted: each of its records
        carries the farther drift (``canary_drift``: disturbed)."""
        found = [d for d in (before, after) if d is not None]
        drift = max(found, key=abs) if found else None
        self.repetition_drifts.append(drift)
        if drift is None:
            return
        log.warning("repetition %d of %d: the canary drifted %+.0f%% around it: its %d "
                    "record(s) are marked disturbed", len(self.repetition_drifts), self.count,
                    100 * drift, len(records))
        for record in records:
            if record.canary_drift is None or abs(drift) > abs(record.canary_drift):
                record.canary_drift = drift

    def execute(self, run: PlannedRun) -> Optional[RunRecord]:
        """The run's combined record. After an interrupt, every run measured at least once is
        handed out (in plan order); a run never measured is None (the engine skips it and
        goes on), and the signal is raised once the last measured run's results line is
        written (``GUARD.raise_after_line``), or at once if no run was measured."""
        if not self.orders:
            self.measure()
        records = self.records.get(run.key)
        if not records:
            if self.stop is None:
                raise KeyError(run.key)
            if not self._last_measured():
                raise self.stop
            return None
        if self.stop is not None and run.key == self._last_measured():
            GUARD.raise_after_line(getattr(self.stop, "signum", signal.SIGINT))
        self._handed.add(run.key)
        return combine(records, self.keep)

    def _last_measured(self) -> str:
        if self._last is None:
            measured = [run.key for run in self.runs if self.records.get(run.key)]
            self._last = measured[-1] if measured else ""
        return self._last

    def close(self) -> None:
        """Nothing held between repetitions: each one's process is closed when it ends. The
        journal goes once every run measured had its record handed out (and written)."""
        if self.journal is not None:
            measured = {key for key, records in self.records.items() if records}
            self.journal.close(remove=bool(self.orders) and measured <= self._handed)
