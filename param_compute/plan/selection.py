"""Which planned runs a session measures: the one owner of run selection. Torch-free.

A run is selected when every part of the selection wants it, asked in this order:

* the id window (``--resume-id`` / ``--stop-id``, matched against ``op_name|id``): runs before
  the resume id are skipped, the stop id and everything after it too (stateful: it follows the
  plan in order);
* the done runs (``--resume`` of a results file): a run already in the file is skipped;
* the filter (``--only``/``-k``/``--input-id``: ``plan.filters``);
* the shard (``--shard I/N`` or torchrun: ``plan.sharding``): only this shard's runs.

A step replay's run (``runtime.step_run``) follows the window and the done runs like any run;
the filter does not apply to it (it replays every call, whatever the filter chose among the
configs), and of several shards the first alone takes it.
"""

from __future__ import annotations

from typing import Any, Container, List, Optional


class Selection:
    """The runs a session measures (see the module's doc); ``restart`` gives a fresh copy for
    another pass over the plan (``--repetitions`` lists the runs first)."""

    def __init__(self, resume_id: Optional[str] = None, stop_id: Optional[str] = None,
                 done: Container[str] = (), run_filter: Any = None, shard: Any = None,
                 shard_index: int = 0):
        """``done``: run keys already measured; ``run_filter``: a ``plan.filters.RunFilter``
        (or anything with ``wants(run)``); ``shard``: a ``plan.sharding.ShardPlan`` and
        ``shard_index`` its index."""
        self.resume_id = resume_id
        self.stop_id = stop_id
        self.done = done
        self.run_filter = run_filter if run_filter else None
        self.shard = shard
        self.shard_index = shard_index
        self.resumed = resume_id is None
        self.stopped = False

    def restart(self) -> "Selection":
        return Selection(self.resume_id, self.stop_id, self.done, self.run_filter, self.shard,
                         self.shard_index)

    def _in_window(self, key: str) -> bool:
        if self.resume_id is None and self.stop_id is None:
            return True
        if self.stop_id is not None and key == self.stop_id:
            self.stopped = True
        if self.stopped:
            return False
        if not self.resumed and key == self.resume_id:
            self.resumed = True
        return self.resumed

    def wants(self, run) -> bool:
        """Whether ``run`` is measured; call it once per run, in plan order."""
        key = run.key
        if not self._in_window(key) or key in self.done:
            return False
        if getattr(run, "step", None) is not None:  # the step replay: see the module's doc
            return self.shard is None or self.shard_index == 0
        if self.run_filter is not None and not self.run_filter.wants(run):
            return False
        return self.shard is None or self.shard.wants(run)

    def unmatched(self) -> List[str]:
        """What the window asked for that no run matched (said after the run)."""
        out = []
        if not self.resumed:
            out.append(f"--resume-id {self.resume_id!r} matched no run, so nothing ran")
        if self.stop_id is not None and not self.stopped:
            out.append(f"--stop-id {self.stop_id!r} matched no run")
        return out
