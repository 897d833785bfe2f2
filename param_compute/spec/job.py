"""A job spec: the process groups of a distributed step and each rank's part of its configs.

A spec is a *job* when it names collectives (``operators.collectives``) or holds the reserved
``__process_groups__`` key a multi-rank capture writes::

    "__process_groups__": {"world_size": 2,
                           "groups": {"0": {"ranks": [0, 1], "backend": "gloo",
                                            "desc": "default_pg"}, ...}}

``groups`` names every process group the captured ranks used (Kineto's ``pg_config``, or a
live run's groups): its global ``ranks``, the ``backend`` it was recorded with and its
description (both informational: a replay builds each group with its own device's backend,
``runtime.job``). A collective config names its group by these names (``group``); ``world``
is every rank. ``world_size`` is the number of ranks the job was captured on: a replay with
another is refused.

Every input config (arg-spec-list) of a captured job may say which ranks ran it
(``ranks``): ``{"0": {"count": 3, "original_us": {...}}, "1": {...}}`` with, for a
collective whose arguments differ on a rank (split sizes, a gather's list on its root), that
rank's own ``args``/``kwargs``. ``count`` is then the total over the ranks; each rank replays
its own count, times and arguments (``for_rank``), and only the configs it ran.

Torch-free: validation (``spec.reserved``) and planning (``plan.job``) read it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

PROCESS_GROUPS_KEY = "__process_groups__"
#: The most ranks a job may have (a bound on untrusted input).
MAX_WORLD = 1 << 16
MAX_GROUPS = 4096
MAX_TEXT = 200
#: What an arg-spec-list's per-rank entry may hold.
RANK_FIELDS = ("count", "original_us", "args", "kwargs")

Located = Tuple[tuple, str, Optional[str]]


def _text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT and value.isprintable()


def _rank(value: Any, world: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < world


def process_groups_problems(value: Any) -> List[Located]:
    """(path under the key, message, hint) for each problem of a ``__process_groups__``."""
    if not isinstance(value, dict):
        return [((), f"{PROCESS_GROUPS_KEY} is an object {{world_size, groups}}", None)]
    problems: List[Located] = [((key,), f"unknown key {str(key)[:40]!r}",
                                "allowed keys: world_size, groups")
                               for key in value if key not in ("world_size", "groups")]
    world = value.get("world_size")
    if not (isinstance(world, int) and not isinstance(world, bool) and 1 <= world <= MAX_WORLD):
        problems.append((("world_size",), f"world_size is the job's number of ranks, an "
                         f"integer from 1 to {MAX_WORLD}", None))
        return problems
    groups = value.get("groups", {})
    if not isinstance(groups, dict) or len(groups) > MAX_GROUPS:
        return problems + [(("groups",), f"groups is an object of at most {MAX_GROUPS} "
                            "process groups by name", None)]
    for name, group in groups.items():
        where = ("groups", str(name)[:40])
        if not _text(name) or not name:
            problems.append((where, "a group's name is printable text of at most "
                             f"{MAX_TEXT} characters", None))
        if not isinstance(group, dict):
            problems.append((where, "a group is an object {ranks, backend, desc}", None))
            continue
        for key in group:
            if key not in ("ranks", "backend", "desc"):
                problems.append((where + (str(key)[:40],), f"unknown key {str(key)[:40]!r}",
                                 "allowed keys: ranks, backend, desc"))
        ranks = group.get("ranks")
        if not isinstance(ranks, list) or not ranks or not all(_rank(r, world) for r in ranks) \
                or len(set(ranks)) != len(ranks):
            problems.append((where + ("ranks",), f"ranks is a list of distinct ranks from 0 to "
                             f"{world - 1} (the job's world_size is {world})", None))
        for key in ("backend", "desc"):
            if key in group and not _text(group[key]):
                problems.append((where + (key,), f"{key} is printable text of at most "
                                 f"{MAX_TEXT} characters", None))
    return problems


def rank_entry_problems(ranks: Any, world: Optional[int]) -> List[Located]:
    """Problems of an arg-spec-list's ``ranks`` keys (each entry's fields are the schema's to
    check, its data specs checked as any other's)."""
    if not isinstance(ranks, dict) or not ranks:
        return [((), "ranks is an object of the ranks that ran this config: "
                     '{"0": {"count": N}, ...}', None)]
    limit = world if world is not None else MAX_WORLD
    return [((str(key)[:40],), f"{str(key)[:40]!r} is no rank of the job (0 to {limit - 1})",
             None) for key in ranks
            if not (isinstance(key, str) and key.isdigit() and len(key) <= 6
                    and int(key) < limit)]


def process_groups(raw: Any) -> Optional[Dict[str, Any]]:
    """A (validated) spec's ``__process_groups__``, or None."""
    value = raw.get(PROCESS_GROUPS_KEY) if isinstance(raw, dict) else None
    return value if isinstance(value, dict) else None


def for_rank(config_input: Dict[str, Any], rank: int) -> Optional[Dict[str, Any]]:
    """An expanded input config as ``rank`` runs it: its own count, original times and (where
    they differ) arguments; None when the config says other ranks ran it and this one did not.
    A config without ``ranks`` is every rank's, as written."""
    ranks = config_input.get("ranks")
    if not isinstance(ranks, dict):
        return config_input
    entry = ranks.get(str(rank))
    if not isinstance(entry, dict):
        return None
    out = {key: value for key, value in config_input.items() if key != "ranks"}
    for key in RANK_FIELDS:
        if key in entry:
            out[key] = entry[key]
    return out
