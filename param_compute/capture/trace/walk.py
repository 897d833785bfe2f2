"""Which nodes of an execution trace a replay runs, which it leaves out and why, step by step.

Each operator call is captured once, at the level the dispatcher runs it: a composite wrapper
(``aten::linear`` over ``aten::t`` and ``aten::addmm``) is not replayed, its children are; any
other operator is replayed whole and its internal calls are not replayed again. One exception
keeps replays portable: a composite whose calls below reach a backend kernel (``cudnn_*``,
``miopen_*``, ``mkldnn_*``: ``aten::batch_norm`` over ``cudnn_batch_norm``) is replayed as the
composite, which picks the replay device's own kernel.

Nodes with compute that carry no operator schema are reported, never dropped silently: Triton
kernels of ``torch.compile`` (``kernel_backend=triton``) and autograd C++ nodes whose body made no
dispatcher call (custom C++ backward functions).

Steps: ``ProfilerStep#N`` record-function nodes mark the iterations a trace spans; ``select_step``
picks one (by default the last complete one, the steady state) or all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from param_compute.capture.accounting import TraceError
from param_compute.capture.schema_args import is_composite_wrapper

BACKEND_PREFIXES = ("cudnn_", "miopen_", "mkldnn_")
#: The record functions a collective's backend opens around its work (``gloo:all_reduce``):
#: filed under the issuing thread's id, though begun or ended on the backend's own thread.
COLLECTIVE_SPAN_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OBSERVER_NODE = "[pytorch|profiler|execution_trace|"


def attr(node: Dict[str, Any], name: str) -> Any:
    for item in node.get("attrs") or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item.get("value")
    return node.get(name)


def parent_id(node: Dict[str, Any]) -> Any:
    return node.get("ctrl_deps", node.get("parent"))


def repair_nesting(nodes: List[Dict[str, Any]], by_id: Dict[Any, Dict[str, Any]]
                   ) -> Tuple[Dict[int, Any], Optional[Dict[str, Any]]]:
    """The parent links the execution-trace observer recorded wrong, rebuilt (node id -> its
    parent's; the nodes are left as they are), and what was rebuilt (``None``: nothing).

    The observer keeps one stack of open calls per thread id: a call's parent is the top when
    it begins, and a call that ends pops the top, whatever that is. A collective's backend span
    (``gloo:all_reduce``) is filed under the issuing thread's id but begins or ends on the
    backend's thread, amid that thread's calls; from then on the stack holds the wrong ids,
    and calls are filed under calls that had already ended: an all-to-all under an
    ``aten::empty`` is taken for part of it, and silently lost. A node's id follows its call's
    start and its place in the file its call's end, so a call's true parent is the latest call
    begun before it on its thread that ended after it. Rebuilt from those two orders for each
    thread id that holds a span and shows the damage (a parent written before its child),
    where the file is otherwise in end order: a file re-sorted by id is left as it is."""
    position: Dict[int, int] = {}
    for index, node in enumerate(nodes):
        if type(node["id"]) is int:
            position[node["id"]] = index
    threads: Dict[Any, List[Dict[str, Any]]] = {}
    roots: Dict[Any, int] = {}
    spanned = set()
    for node in nodes:
        if type(node["id"]) is not int:
            continue
        name, tid = str(node.get("name", "")), attr(node, "tid")
        if isinstance(tid, (list, dict)):
            continue
        if name.startswith(_OBSERVER_NODE):
            if name.endswith("thread]"):
                roots.setdefault(tid, node["id"])
        elif name.startswith(COLLECTIVE_SPAN_PREFIXES):
            spanned.add(tid)
        else:
            threads.setdefault(tid, []).append(node)
    rebuilt: Dict[int, Any] = {}
    per_thread = 0
    for tid, members in threads.items():
        if tid not in spanned:
            continue
        inside = {node["id"] for node in members}
        in_end_order = damaged = 0
        for node in members:
            parent = parent_id(node)
            if parent in inside and parent != node["id"]:
                if position[parent] > position[node["id"]]:
                    in_end_order += 1
                else:
                    damaged += 1
            elif parent in by_id and str(by_id[parent].get("name", "")).startswith(
                    COLLECTIVE_SPAN_PREFIXES):
                damaged += 1
        if not damaged or in_end_order < 2 * damaged:
            continue
        stack: List[int] = []
        before = len(rebuilt)
        for node in sorted(members, key=lambda n: n["id"]):
            while stack and position[stack[-1]] < position[node["id"]]:
                stack.pop()  # ended before this call did: before it began
            recorded = parent_id(node)
            parent = stack[-1] if stack else roots.get(tid, recorded)
            if parent != recorded:
                rebuilt[node["id"]] = parent
            stack.append(node["id"])
        per_thread += len(rebuilt) > before
    if not rebuilt:
        return rebuilt, None
    return rebuilt, {
        "links": len(rebuilt), "threads": per_thread,
        "why": "a collective's backend span, filed under its issuing thread but begun or ended "
               "on the backend's own, shifted the observer's stack of open calls: parents "
               "rebuilt from the calls' start order (ids) and end order (the file)"}


def is_backend_op(name: str) -> bool:
    base = name.split("::", 1)[-1]
    return base.startswith(BACKEND_PREFIXES)


@dataclass
class Dropped:
    """A node with compute that the replay leaves out: ``kind`` is a key of
    ``accounting.KINDS``."""

    node: Dict[str, Any]
    kind: str
    reason: str


@dataclass
class Steps:
    """The ``ProfilerStep#N`` windows of a trace and the one(s) captured."""

    found: List[int] = field(default_factory=list)
    selected: Optional[List[int]] = None  # None: the whole trace (no steps, or --trace-step all)
    default: bool = False  # the selection is the default (the last complete step)
    calls_per_step: Dict[int, int] = field(default_factory=dict)

    def describe(self) -> str:
        if not self.found:
            return "no ProfilerStep#N windows: the whole trace captured"
        if self.selected is None:
            per_step = ", ".join(f"#{n} {c}" for n, c in self.calls_per_step.items())
            return (f"{len(self.found)} ProfilerStep windows (calls: {per_step}): all "
                    "captured (counts are totals over them)")
        how = "the last complete step, by default; --trace-step N picks another, " \
              "--trace-step all keeps them all" if self.default else "chosen with --trace-step"
        per_step = ", ".join(f"#{n} {c}" for n, c in self.calls_per_step.items())
        return (f"{len(self.found)} ProfilerStep windows (calls: {per_step}): captured "
                f"#{self.selected[0]} ({how}); counts are per step")

    def to_json(self) -> Dict[str, Any]:
        return {"found": self.found, "captured": self.selected, "default": self.default,
                "calls_per_step": {str(k): v for k, v in self.calls_per_step.items()}}


class TraceTree:
    """Nodes by id, children, roots and the ``ProfilerStep#N`` windows of one trace."""

    def __init__(self, trace: Dict[str, Any], source: Any = "execution trace"):
        self.nodes = [n for n in trace["nodes"] if isinstance(n, dict) and "id" in n]
        self.by_id = {n["id"]: n for n in self.nodes}
        #: parent links rebuilt where the observer recorded them wrong (``repair_nesting``):
        #: node id -> parent id, and what was rebuilt (None: nothing)
        self._rebuilt, self.repaired = repair_nesting(self.nodes, self.by_id)
        self.children: Dict[Any, List[Dict[str, Any]]] = {}
        self.roots: List[Dict[str, Any]] = []
        for node in self.nodes:
            parent = self.parent_of(node)
            if parent in self.by_id and parent != node["id"]:
                self.children.setdefault(parent, []).append(node)
            else:
                self.roots.append(node)
        self._refuse_cycles(source)
        self.steps: Dict[int, Dict[str, Any]] = {}
        for node in self.nodes:
            match = _STEP.match(str(node.get("name", "")))
            if match:
                self.steps[int(match.group(1))] = node
        self.has_operator_below = set()
        for node in self.nodes:
            if attr(node, "op_schema"):
                self.mark_ancestors(node, self.has_operator_below)

    def parent_of(self, node: Dict[str, Any]) -> Any:
        """A node's parent id: as recorded, or as rebuilt (``repair_nesting``)."""
        rebuilt = self._rebuilt.get(node["id"]) if self._rebuilt else None
        return parent_id(node) if rebuilt is None else rebuilt

    def _parent(self, node_id: Any) -> Any:
        parent = self.parent_of(self.by_id[node_id])
        return parent if parent in self.by_id and parent != node_id else None

    def _refuse_cycles(self, source: Any) -> None:
        """``TraceError`` naming the nodes whose parent links form a cycle (nodes that reach
        no root: every walk up or down the tree would go round for ever)."""
        state: Dict[Any, bool] = {}  # node id -> False while on the current walk, True done
        for node in self.nodes:
            path, current = [], node["id"]
            while current is not None and current not in state:
                state[current] = False
                path.append(current)
                current = self._parent(current)
            if current is not None and state[current] is False:
                cycle = path[path.index(current):]
                shown = " -> ".join(str(i) for i in cycle[:8] + [current])
                more = f" ({len(cycle)} nodes)" if len(cycle) > 8 else ""
                raise TraceError(source, [f"the parent links (ctrl_deps) of nodes {shown}"
                                          f"{more} form a cycle; a trace's nodes form a tree"])
            for node_id in path:
                state[node_id] = True

    def mark_ancestors(self, node: Dict[str, Any], marks: set) -> None:
        parent, guard = self.parent_of(node), 0
        while parent in self.by_id and parent not in marks and guard < len(self.nodes):
            marks.add(parent)  # once marked, so are its ancestors
            guard += 1
            if self.parent_of(self.by_id[parent]) == parent:
                break
            parent = self.parent_of(self.by_id[parent])

    def step_of(self) -> Dict[Any, int]:
        """node id -> the step number of the window holding it.

        A window runs from its ``ProfilerStep#N`` node's id to the last id below that node:
        ids follow start order, and the autograd thread's nodes (the backward pass, which the
        step waits for) are not below the step node but fall between those ids."""
        spans = []
        for number, step in self.steps.items():
            last, stack, seen = step["id"], [step], set()
            while stack:
                node = stack.pop()
                if node["id"] in seen:  # cycles are refused when the tree is built; never loop
                    continue
                seen.add(node["id"])
                last = max(last, node["id"]) if isinstance(node["id"], int) else last
                stack.extend(self.children.get(node["id"], []))
            spans.append((step["id"], last, number))
        out: Dict[Any, int] = {}
        for node in self.nodes:
            node_id = node["id"]
            for first, last, number in spans:
                if isinstance(node_id, int) and first <= node_id <= last:
                    out[node_id] = number
                    break
        return out

    def complete_steps(self) -> List[int]:
        """Steps whose window holds at least one operator (a window cut short by the trace's
        start or end has no node of its own: the observer writes a node when it ends)."""
        return sorted(n for n, node in self.steps.items() if node["id"] in self.has_operator_below)


def select_step(tree: TraceTree, step: Optional[str]) -> Tuple[Steps, Optional[set]]:
    """(what was chosen, the ids of the nodes inside the chosen window, or None for all).

    ``step``: None (the last complete step), ``"all"`` or a step number."""
    found = tree.complete_steps()
    steps = Steps(found=found)
    if step is not None and step != "all":
        try:
            number = int(step)
        except ValueError:
            raise ValueError(f"--trace-step {step!r}: write a step number or 'all'") from None
        if number not in found:
            raise ValueError(f"--trace-step {number}: the trace has no complete ProfilerStep#{number}"
                             f" (it has {', '.join(f'#{n}' for n in found) or 'none'})")
    if not found or step == "all":
        return steps, None
    chosen = found[-1] if step is None else int(step)
    steps.selected, steps.default = [chosen], step is None
    step_of = tree.step_of()
    return steps, {node_id for node_id, number in step_of.items() if number == chosen}


def _autograd_body_dropped(tree: TraceTree, node: Dict[str, Any]) -> Optional[Dropped]:
    """A custom C++ autograd function's node (``torch::autograd::CppNode<...>``) whose body made
    no dispatcher call: its compute (a fused backward kernel) is not in the trace. Built-in
    nodes (``AddBackward0``) that only pass gradients on are not compute."""
    name = str(node.get("name", ""))
    if "CppNode<" not in name or name.startswith("autograd::engine::evaluate_function"):
        return None
    if node["id"] in tree.has_operator_below:
        return None
    return Dropped(node, "autograd_node",
                   f"autograd C++ node {name} made no dispatcher call: the compute of its "
                   "body is not in the trace")


def replay_level_nodes(tree: TraceTree, window: Optional[set] = None
                       ) -> Tuple[List[Dict[str, Any]], List[Dropped]]:
    """(the operator calls a replay runs, each once, in id order; the nodes with compute it
    leaves out), within ``window`` (node ids) when given.

    Walking down from the roots, an operator node is taken whole (with everything it calls
    internally: ``aten::mm``'s own ``resolve_conj`` and output ``empty`` are part of its time)
    unless it is a pure composite wrapper (CompositeImplicitAutograd, e.g. ``aten::linear``)
    with operators below it and no backend kernel among them: then those operators are taken
    instead. That is the level a ``TorchDispatchMode`` sees, so both capture paths fold ops
    alike, and no work is replayed twice.
    """
    taken, dropped = _walk(tree, window, set())
    keep = set()  # composites above a backend kernel that would be replayed: replayed instead
    for node in taken:
        if is_backend_op(str(node.get("name", ""))):
            tree.mark_ancestors(node, keep)
    if keep:
        taken, dropped = _walk(tree, window, keep)
    return taken, dropped


def _walk(tree: TraceTree, window: Optional[set], keep: set
          ) -> Tuple[List[Dict[str, Any]], List[Dropped]]:
    taken: List[Dict[str, Any]] = []
    dropped: List[Dropped] = []
    seen = set()
    stack = sorted(tree.roots, key=lambda n: n["id"], reverse=True)
    while stack:
        node = stack.pop()
        if node["id"] in seen:
            continue
        seen.add(node["id"])
        inside = window is None or node["id"] in window
        schema = attr(node, "op_schema")
        if schema and inside:
            node_id = node["id"]
            if not (node_id in tree.has_operator_below and is_composite_wrapper(schema)
                    and node_id not in keep):
                taken.append(node)
                continue
        elif inside and attr(node, "kernel_backend") == "triton":
            dropped.append(Dropped(node, "triton", f"Triton kernel {node.get('name')} "
                                   f"({attr(node, 'kernel_file') or 'no kernel file'}): "
                                   "generated code with no aten schema"))
            continue
        elif inside and not schema:
            lost = _autograd_body_dropped(tree, node)
            if lost is not None:
                dropped.append(lost)
        stack.extend(sorted(tree.children.get(node["id"], []), key=lambda n: n["id"],
                            reverse=True))
    return sorted(taken, key=lambda n: n["id"]), sorted(dropped, key=lambda d: d.node["id"])
