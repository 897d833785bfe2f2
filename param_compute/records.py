"""Typed result records and their JSON form (PARAM's layout, extended compatibly).

A results file is JSON Lines: a header ``{run_options, sys_info, start_time}``, one line per run
``{op_name, id, status, metric, stats, config}`` (``error`` instead of metrics when a run failed),
and a last line ``{finish_time, ...}``. Times are milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .stats import NOISY_CV, summarize

STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_DRY_RUN = "dry-run"


@dataclass
class PassResult:
    """Times of one pass (``forward`` or ``backward``) of one run.

    ``extra`` holds further PARAM-style metrics by name (``measure.gpu.memory`` in MB,
    ``measure.host_time``, ``compile.time``...). ``iterations`` counts measured calls (in
    continuous mode each ``measure.time`` value is the mean of a block of calls). ``flops`` and
    ``bytes`` are the work of one call, when counted.
    """

    name: str
    warmup_ms: List[float]
    measure_ms: List[float]
    extra: Dict[str, List[float]] = field(default_factory=dict)
    iterations: Optional[int] = None
    flops: Optional[int] = None
    bytes: Optional[int] = None

    def metric(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"warmup.time": self.warmup_ms, "measure.time": self.measure_ms}
        out.update(self.extra)
        if self.iterations is not None:
            out["measure.iterations"] = self.iterations
        return out

    def throughput(self, median_ms: Optional[float]) -> Optional[Dict[str, Optional[float]]]:
        """FLOPs and bytes per call with TFLOP/s and GB/s at ``median_ms``."""
        if self.flops is None and self.bytes is None:
            return None
        seconds = median_ms / 1e3 if median_ms else None
        return {
            "flops": self.flops,
            "bytes": self.bytes,
            "tflops_per_s": self.flops / seconds / 1e12 if seconds and self.flops is not None
            else None,
            "gb_per_s": self.bytes / seconds / 1e9 if seconds and self.bytes is not None
            else None,
        }


@dataclass
class RunError:
    type: str
    message: str
    phase: str  # "build", "data", "forward", "backward"


@dataclass
class RunRecord:
    op_name: str
    id: str
    config: Dict[str, Any]
    status: str = STATUS_OK
    passes: List[PassResult] = field(default_factory=list)
    error: Optional[RunError] = None

    def stats(self) -> Dict[str, Optional[Dict[str, float]]]:
        return {p.name: summarize(p.measure_ms) for p in self.passes}

    @property
    def count(self) -> Optional[int]:
        """How often a captured config occurred in its workload (its input's ``count``)."""
        config_input = self.config.get("input") if isinstance(self.config, dict) else None
        return config_input.get("count") if isinstance(config_input, dict) else None

    @classmethod
    def from_fields(cls, fields: Dict[str, Any]) -> "RunRecord":
        """Rebuild a record from ``dataclasses.asdict`` output (records cross process bounds)."""
        fields = dict(fields)
        fields["passes"] = [PassResult(**p) for p in fields.get("passes", [])]
        if fields.get("error") is not None:
            fields["error"] = RunError(**fields["error"])
        return cls(**fields)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"op_name": self.op_name, "id": self.id, "status": self.status}
        if self.count is not None:
            out["count"] = self.count
        if self.passes:  # an error record keeps the passes measured before the failure
            stats = self.stats()
            out["metric"] = {p.name: p.metric() for p in self.passes}
            out["stats"] = stats
            throughput = {p.name: p.throughput(stats[p.name]["median"] if stats[p.name] else None)
                          for p in self.passes}
            if any(throughput.values()):
                out["throughput"] = throughput
            noisy = [name for name, s in stats.items() if s and s["n"] > 2 and s["cv"] > NOISY_CV]
            if noisy:
                out["noisy"] = noisy
        if self.error is not None:
            out["error"] = {"type": self.error.type, "message": self.error.message,
                            "phase": self.error.phase}
        out["config"] = self.config
        return out
