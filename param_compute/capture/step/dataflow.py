"""The step's dataflow at capture: which earlier call produced each tensor a call reads.

Both capture paths hand every call (captured or not) to ``StepRecorder.call`` with its tensor
inputs and outputs, each named by its place (``step_file`` paths) and by two keys: an exact
one (the tensor itself: a trace's tensor id, a live tensor's object) and a layout one (its
storage, offset, shape, strides, dtype). An input is fed by the latest call that produced a
tensor with the same exact key, else the same layout key (a saved tensor unpacked for the
backward pass is a new tensor object over the same memory); else it is an external tensor
(a parameter, the batch, an output of a call that was not captured), shared by every call that
reads it. Calls that were not captured produce nothing a replay can feed: their outputs'
keys are forgotten, so a consumer gets a generated tensor rather than a stale one.

Async collectives: a collective issued asynchronously (``asynchronous``) is waited, in the
replay, where the original waited it: where the trace records the wait (``waited``: NCCL's
``record_param_comms`` ``wait``), else right before the first later call that reads or writes
memory it touched (the same tensor or the same storage; a call not captured hands the wait on
to the next captured call), else at the step's end. The step file says so in that
call's ``waits``.

A live capture also sees when each output was released (``released``): a gradient stored in
``.grad`` outlives the step and is freed by the next step's ``zero_grad``, long after its last
reader. Where that is later than the output's last reader, the step file says so (``hold``),
and the replay keeps the tensor as long: which memory the allocator can recycle, and how many
fresh pages the step touches, depend on it.
"""

from __future__ import annotations

from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from param_compute.spec.step_file import step_path, write_step_file

#: A ``hold`` that lasts past the step's end (released by the next step, before its first call).
OUTLIVES = -1
#: (argument path, exact key, layout key) of one tensor input or output.
TensorSlot = Tuple[List[Any], Hashable, Hashable]


def _storage(layout: Hashable) -> Optional[Hashable]:
    """The storage a layout key names (a trace's storage id, a live tensor's data pointer)."""
    if isinstance(layout, tuple) and len(layout) > 1 and layout[0] == "L" \
            and layout[1] is not None:
        return ("S", layout[1])
    return None


class StepRecorder:
    """A step's captured calls in order, each with the config it ran and its dataflow."""

    def __init__(self):
        self.calls: List[Dict[str, Any]] = []
        self._produced: Dict[Hashable, Tuple[int, List[int]]] = {}
        self._external: Dict[Hashable, int] = {}
        self.externals = 0
        self.real_step_us: Optional[float] = None
        #: The unprofiled step's host time (to the step function's return) and the host
        #: gap after its last captured call (with the calls' ``gap_us``: a live capture's).
        self.real_host_us: Optional[float] = None
        self.tail_gap_us = 0.0
        #: How ``real_host_us`` was timed: "unprofiled" (a live capture), or "profiled" (a
        #: trace's step window less the profiler's calibrated cost: an upper bound).
        self.real_host_from = "unprofiled"
        #: (call, output path) -> the call after which it was released; absent: not seen
        #: released (a trace), ``OUTLIVES``: still alive when the capture ended.
        self.releases: Dict[Tuple[int, Tuple[int, ...]], int] = {}
        #: Memory (tensor, storage) an async collective still owns -> its call; the waits a
        #: call not captured handed on to the next captured one.
        self._in_flight: Dict[Hashable, int] = {}
        self._handed: List[int] = []
        #: An async collective's sequence number (a trace's ``record_param_comms``) -> its call.
        self._by_seq: Dict[int, int] = {}

    def waited(self, seq: int) -> None:
        """The trace records that the collective numbered ``seq`` was waited here: the next
        captured call waits it."""
        index = self._by_seq.pop(seq, None)
        if index is None:
            return
        self._in_flight = {k: v for k, v in self._in_flight.items() if v != index}
        self._handed.append(index)

    def _waits(self, slots: Sequence[TensorSlot]) -> List[int]:
        """The async collectives whose memory these tensors touch: waited now."""
        if not self._in_flight:
            return []
        found = set()
        for _, exact, layout in slots:
            for key in (exact, layout, _storage(layout)):
                if key is not None and key in self._in_flight:
                    found.add(self._in_flight[key])
        if found:
            self._in_flight = {k: v for k, v in self._in_flight.items() if v not in found}
        return sorted(found)

    def call(self, config: Optional[Tuple[str, str, str]], inputs: Sequence[TensorSlot],
             outputs: Sequence[TensorSlot], original_us: Optional[float] = None,
             faults: Optional[float] = None, gap_us: Optional[float] = None,
             asynchronous: bool = False, comm_us: Optional[float] = None,
             seq: Optional[int] = None) -> None:
        """One call of the step, in order; ``config`` is None for a call not captured;
        ``original_us`` and ``faults``: its time and minor page faults in the original,
        ``gap_us`` the host time before it that no captured call took (its shape);
        ``asynchronous``: an async collective (its work waited later, ``waits``), and
        ``comm_us`` a collective's communication time in the original, ``seq`` its sequence
        number where the trace gives one (``waited``)."""
        waits = self._waits(list(inputs) + list(outputs))
        if config is None:
            self._handed.extend(waits)
            for _, exact, layout in outputs:
                self._produced.pop(exact, None)
                self._produced.pop(layout, None)
                self._external.pop(exact, None)
                self._external.pop(layout, None)
            return
        index = len(self.calls)
        fed, ext = [], []
        for path, exact, layout in inputs:
            producer = self._produced.get(exact) or self._produced.get(layout)
            if producer is not None:
                fed.append([list(path), producer[0], list(producer[1])])
                continue
            number = self._external.get(exact, self._external.get(layout))
            if number is None:
                number = self.externals
                self.externals += 1
            self._external[exact] = self._external[layout] = number
            ext.append([list(path), number])
        for path, exact, layout in outputs:
            self._produced[exact] = self._produced[layout] = (index, list(path))
            self._external.pop(exact, None)
            self._external.pop(layout, None)
        entry: Dict[str, Any] = {"config": config, "in": fed, "ext": ext}
        waits = sorted(set(waits + self._handed))
        self._handed = []
        if waits:
            entry["waits"] = waits
        if comm_us is not None:
            entry["comm_us"] = round(float(comm_us), 3)
        if asynchronous:  # its memory is the collective's until waited
            if seq is not None:
                self._by_seq[seq] = index
            for _, exact, layout in list(inputs) + list(outputs):
                for key in (exact, layout, _storage(layout)):
                    if key is not None:
                        self._in_flight[key] = index
        if original_us is not None:
            entry["original_us"] = round(float(original_us), 3)
        if faults is not None:
            entry["faults"] = round(float(faults), 1)
        if gap_us is not None:
            entry["gap_us"] = round(float(gap_us), 3)
        self.calls.append(entry)

    def outlives(self, index: int, path: Sequence[int]) -> None:
        """Output ``path`` of call ``index`` is alive now (the capture is ending)."""
        self.releases.setdefault((index, tuple(path)), OUTLIVES)

    def released(self, index: int, path: Sequence[int]) -> None:
        """Output ``path`` of call ``index`` was released after the latest call recorded."""
        self.releases[(index, tuple(path))] = len(self.calls) - 1

    def _holds(self) -> Dict[int, List[List[Any]]]:
        """call -> its ``hold`` entries: outputs released later than their last reader."""
        last_reader: Dict[Tuple[int, Tuple[int, ...]], int] = {}
        for index, entry in enumerate(self.calls):
            for _, producer, out in entry["in"]:
                last_reader[(producer, tuple(out))] = index
        holds: Dict[int, List[List[Any]]] = {}
        for (producer, out), until in sorted(self.releases.items()):
            if until == OUTLIVES or until > last_reader.get((producer, out), producer):
                holds.setdefault(producer, []).append([list(out), until])
        return holds

    def to_json(self, run_keys: Any, spec_name: str, source: str,
                original: Optional[Dict[str, Any]] = None,
                spec_sha256: Optional[str] = None) -> Dict[str, Any]:
        """The step file's body; ``run_keys`` maps each call's config to its run key (or is
        a function of the call's index and config: a job's collectives, ``capture.job``);
        ``spec_name`` and ``spec_sha256`` name the spec written with it (its file's name and
        the sha256 of its bytes), so that a replay can tell a foreign or stale step file."""
        calls = []
        holds = self._holds()
        key_of = run_keys if callable(run_keys) else (lambda _, config: run_keys[config])
        for index, entry in enumerate(self.calls):
            call = {"run": key_of(index, entry["config"])}
            if index in holds:
                call["hold"] = holds[index]
            if entry["in"]:
                call["in"] = entry["in"]
            if entry["ext"]:
                call["ext"] = entry["ext"]
            for key in ("original_us", "faults", "gap_us", "waits", "comm_us"):
                if key in entry:
                    call[key] = entry[key]
            calls.append(call)
        body: Dict[str, Any] = {"spec": spec_name}
        if spec_sha256 is not None:
            body["spec_sha256"] = spec_sha256
        body.update({"source": source, "externals": self.externals, "calls": calls})
        if self.real_step_us is not None:
            body["real_step_us"] = round(self.real_step_us, 1)
        if self.real_host_us is not None and any("gap_us" in c for c in calls):
            body["real_host_us"] = round(self.real_host_us, 1)
            body["real_host_from"] = self.real_host_from
            body["tail_gap_us"] = round(self.tail_gap_us, 3)
        if original:
            body["original"] = original
        return body

    def write(self, spec_path, run_keys, source: str,
              original: Optional[Dict[str, Any]] = None, spec_sha256: Optional[str] = None):
        """Write ``NAME.step.json`` beside the spec (``spec_sha256``: of the spec's bytes)."""
        return write_step_file(step_path(spec_path), self.to_json(
            run_keys, spec_path.name, source, original, spec_sha256))

    @property
    def fed_inputs(self) -> int:
        return sum(len(entry["in"]) for entry in self.calls)
