"""What a step replay will allocate, estimated from its data specs before anything is allocated.

The step replay (``step_replay``) binds every call once: each call's arguments are generated
from its config, the inputs an earlier call feeds are dropped again at once, and each external
tensor of the step is kept once, shared by the readers that take it with the first reader's
shape and dtype. While a step runs, a fed tensor lives from the call producing it to its last
reader (or as long as ``hold`` says; past the step's end: to the next step's start).

``step_bytes`` is the larger of the two peaks this gives, from shapes, strides and dtypes alone
(``memory_guard``): binding (every argument bound so far, plus one call's whole input while it
is made) and stepping (every bound argument, plus the fed tensors alive together at the step's
busiest call). Every call counts, fed or not, whether it will run or fail. Build arguments
count once per build. Outputs that no later call reads are not seen, as for a config's
outputs: the address-space cap of an isolated worker is their backstop.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from param_compute.plan.tensor_bytes import tensor_spec_bytes
from param_compute.runtime.memory_guard import config_bytes
from param_compute.runtime.step_binding import tensor_spec


def _path_bytes(config_input: Dict[str, Any], path: List[Any]) -> int:
    spec = tensor_spec(config_input, path)
    return tensor_spec_bytes(spec) if spec is not None else 0


def step_bytes(step: Dict[str, Any], runs: Dict[str, Any], spec, generator) -> int:
    """The estimated peak bytes of replaying ``step`` (see the module's doc); ``runs``: run
    key -> planned run, ``generator(name)``: a data generator by name."""
    bound_total = builds = 0
    binding_peak = 0
    seen_builds = set()
    externals: Dict[int, int] = {}
    slots: Dict[Tuple[int, Tuple[Any, ...]], int] = {}  # (producer, out) -> bytes
    last: Dict[Tuple[int, Tuple[Any, ...]], int] = {}  # (producer, out) -> last call alive
    calls = step["calls"]
    for index, entry in enumerate(calls):
        run = runs[entry["run"]]
        op_spec = spec.operators[run.op_index]
        whole = config_bytes(generator(op_spec.input_data_generator), run.input)
        if run.build_key not in seen_builds:
            seen_builds.add(run.build_key)
            builds += config_bytes(generator(op_spec.build_data_generator), run.build)
        fed = 0
        for path, producer, out in entry.get("in", []):
            size = _path_bytes(run.input, path)
            fed += size
            slot = (producer, tuple(out))
            slots.setdefault(slot, size)
            last[slot] = max(last.get(slot, index), index)
        shared = 0  # externals an earlier reader made: this reader's copy is dropped
        for path, number in entry.get("ext", []):
            size = _path_bytes(run.input, path)
            if number not in externals:
                externals[number] = size  # the first reader's tensor is the shared one
            elif externals[number] == size:
                shared += size
        binding_peak = max(binding_peak, builds + bound_total + whole)
        bound_total += max(0, whole - fed - shared)
    for index, entry in enumerate(calls):  # outputs kept past their last reader
        for out, until in entry.get("hold", []):
            slot = (index, tuple(out))
            if slot in slots:
                last[slot] = len(calls) - 1 if until < 0 else max(last[slot], until)
    live = [0] * (len(calls) + 1)  # a difference array over call indices
    for slot, size in slots.items():
        producer, end = slot[0], last[slot]
        if producer <= end:
            live[producer] += size
            live[end + 1] -= size
    busiest = running = 0
    for change in live[:-1]:
        running += change
        busiest = max(busiest, running)
    return max(binding_peak, builds + bound_total + busiest)

