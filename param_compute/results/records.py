"""Typed result records and their JSON form (PARAM's layout, extended compatibly).

A results file is JSON Lines: a header ``{run_options, sys_info, start_time}``, one line per run
``{op_name, id, status, metric, stats, config}`` (plus ``error`` when a run failed), and a last
line ``{finish_time, ...}``. Times are milliseconds.

A reader written for PARAM's files reads ours: every ``metric`` value is a list of numbers, the
``*.gpu.memory`` lists are there on every device (zeros where the device has none), every run
record has a ``metric`` dict, and the header carries PARAM's keys (``add_param_header_keys``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from param_compute.results.stats import (SUMMARY_KEYS, across_repetitions, is_disturbed,
                                         is_noisy, summarize, thin)
from param_compute.results.targets import evaluate_target
from param_compute.results.utilization import utilization

#: The ``kind`` of a record's line: a config's run, or a step replay's (``step`` details).
KIND_RUN = "run"
KIND_STEP = "step"
STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_DRY_RUN = "dry-run"


#: Per-sample lists of a pass's metric besides ``measure.time`` (thinned with it).
PER_SAMPLE = ("measure.host_time", "measure.cpu_time", "measure.wall_time", "measure.sm_clock",
              "measure.throttled")
#: Metric keys that are not extra lists of a pass (``PassResult.metric`` makes them).
_OWN_METRIC_KEYS = ("warmup.time", "measure.time", "measure.iterations")


@dataclass(slots=True)
class PassResult:
    """Times of one pass (``forward`` or ``backward``) of one run.

    ``extra`` holds further PARAM-style metrics by name (``measure.gpu.memory`` in MB,
    ``measure.host_time``, ``compile.time``...). ``iterations`` counts measured calls (in
    continuous mode each ``measure.time`` value is the mean of a block of calls). ``flops`` and
    ``bytes`` are the work of one call, when counted; ``peaks`` the machine's peaks for the
    pass's dtype (``flops_per_s``, ``bytes_per_s``), when calibrated.

    ``facts`` are what the measurement knows beyond the times, merged into the pass's stats:
    ``descheduled``, ``involuntary_switches``, ``discarded``, ``stop_reason``, ``peak_bytes``.
    ``summary`` holds the statistics of every sample once the raw times were thinned
    (:meth:`keep_at_most`); otherwise they are computed from ``measure_ms``.
    """

    name: str
    warmup_ms: List[float]
    measure_ms: List[float]
    extra: Dict[str, List[float]] = field(default_factory=dict)
    iterations: Optional[int] = None
    flops: Optional[int] = None
    bytes: Optional[int] = None
    peaks: Optional[Dict[str, Any]] = None
    facts: Dict[str, Any] = field(default_factory=dict)
    summary: Optional[Dict[str, Any]] = None

    def stats(self) -> Optional[Dict[str, Any]]:
        """Statistics of the measured times (all of them, thinned or not) with the facts."""
        summary = self.summary if self.summary is not None else summarize(self.measure_ms)
        return {**summary, **self.facts} if summary is not None else None

    def keep_at_most(self, keep: int, parallel: Sequence[str] = ()) -> None:
        """Thin ``measure_ms`` (and the ``extra`` lists named in ``parallel``, one value per
        sample) to ``keep`` evenly spread values, the statistics computed from all first;
        ``stats.kept`` then says how many values the record holds (``n``: how many there were)."""
        if len(self.measure_ms) <= keep:
            return
        self.summary = summarize(self.measure_ms)
        self.facts["kept"] = min(keep, len(self.measure_ms))
        self.measure_ms = thin(self.measure_ms, keep)
        for name in parallel:
            if name in self.extra:
                self.extra[name] = thin(self.extra[name], keep)

    @classmethod
    def from_json(cls, name: str, metric: Dict[str, Any], stats: Optional[Dict[str, Any]],
                  throughput: Optional[Dict[str, Any]]) -> "PassResult":
        """A pass back from a record's JSON form (``metric``, ``stats`` and ``throughput`` of
        pass ``name``): its times and lists, its facts (the stats beyond the summary), the
        summary itself where the samples were thinned, its work and the peaks its rates were
        judged against."""
        stats = stats if isinstance(stats, dict) else {}
        throughput = throughput if isinstance(throughput, dict) else {}
        iterations = metric.get("measure.iterations")
        facts = {k: v for k, v in stats.items() if k not in SUMMARY_KEYS}
        summary = ({k: v for k, v in stats.items() if k in SUMMARY_KEYS
                    and k not in ("repetition_medians", "kept")} if "kept" in stats else None)
        if "kept" in stats:
            facts["kept"] = stats["kept"]
        return cls(name, list(metric.get("warmup.time") or []),
                   list(metric.get("measure.time") or []),
                   {k: list(v) for k, v in metric.items()
                    if k not in _OWN_METRIC_KEYS and isinstance(v, list)},
                   iterations[0] if isinstance(iterations, list) and iterations else None,
                   throughput.get("flops"), throughput.get("bytes"),
                   _peaks_of(throughput), facts, summary)

    def metric(self) -> Dict[str, List[float]]:
        """PARAM's metric dict: every value a list of numbers (counts too)."""
        out: Dict[str, Any] = {"warmup.time": self.warmup_ms, "measure.time": self.measure_ms}
        out.update(self.extra)
        for phase, times in (("warmup", self.warmup_ms), ("measure", self.measure_ms)):
            # PARAM writes a peak per iteration, 0 where the device has no memory counter.
            out.setdefault(f"{phase}.gpu.memory", [0] * len(times))
        if self.iterations is not None:
            out["measure.iterations"] = [self.iterations]
        return out

    def throughput(self, median_ms: Optional[float]) -> Optional[Dict[str, Optional[float]]]:
        """FLOPs and bytes per call with TFLOP/s and GB/s at ``median_ms``; with peaks, also
        ``flops_util``, ``bw_util``, ``intensity`` and the ``bound`` (``utilization``)."""
        if self.flops is None and self.bytes is None:
            return None
        seconds = median_ms / 1e3 if median_ms else None
        rates = {
            "flops": self.flops,
            "bytes": self.bytes,
            "tflops_per_s": self.flops / seconds / 1e12 if seconds and self.flops is not None
            else None,
            "gb_per_s": self.bytes / seconds / 1e9 if seconds and self.bytes is not None
            else None,
        }
        rates.update(utilization(self.flops, self.bytes, seconds, self.peaks))
        return rates


def _peaks_of(throughput: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The peaks a pass's rates were judged against, read back from its utilizations."""
    peaks = {}
    for rate, scale, util, key in (("tflops_per_s", 1e12, "flops_util", "flops_per_s"),
                                   ("gb_per_s", 1e9, "bw_util", "bytes_per_s")):
        value, fraction = throughput.get(rate), throughput.get(util)
        if isinstance(value, (int, float)) and isinstance(fraction, (int, float)) \
                and fraction > 0:
            peaks[key] = value * scale / fraction
    return peaks or None


@dataclass(slots=True)
class RunError:
    type: str
    message: str
    phase: str  # "build", "data", "forward", "backward"


@dataclass(slots=True)
class RunRecord:
    op_name: str
    id: str
    config: Dict[str, Any]
    status: str = STATUS_OK
    passes: List[PassResult] = field(default_factory=list)
    error: Optional[RunError] = None
    #: The config's target (``{metric, value}``), judged in ``to_json``; ``--verify``'s verdict.
    target: Optional[Dict[str, Any]] = None
    verify: Optional[Dict[str, Any]] = None
    #: ``--repetitions``: per pass, the median of each repetition (``runtime.repetitions``).
    repetition_medians: Optional[Dict[str, List[float]]] = None

    #: How far the canary's time drifted from its own baseline around this run (a fraction:
    #: 0.4 is 40% slower), when beyond its noise band (``measure.canary``).
    canary_drift: Optional[float] = None
    #: A step replay's details (``runtime.step_run``): its record is then a ``step`` line.
    step: Optional[Dict[str, Any]] = None
    #: A collective measured across a job's ranks: ``{kind, group, ranks, bytes}``, with the
    #: bandwidths nccl-tests defines added at the median (``operators.collectives``).
    comms: Optional[Dict[str, Any]] = None

    def stats(self) -> Dict[str, Optional[Dict[str, Any]]]:
        out = {p.name: p.stats() for p in self.passes}
        for name, medians in (self.repetition_medians or {}).items():
            if out.get(name) and medians:
                out[name] = across_repetitions(out[name], medians)
        return out

    def disturbed(self) -> bool:
        """Whether a pass waited for a core too often or the canary drifted around the run."""
        return self.canary_drift is not None or any(
            is_disturbed(p.facts) for p in self.passes)

    @property
    def count(self) -> Optional[int]:
        """How often a captured config occurred in its workload (its input's ``count``)."""
        config = self.config  # ``_input``, inline: asked of every record a run makes
        config_input = config.get("input") if isinstance(config, dict) else None
        return config_input.get("count") if isinstance(config_input, dict) else None

    @property
    def original_us(self) -> Optional[Dict[str, Any]]:
        """A captured config's mean time per call in the captured run (its input's
        ``original_us``: ``{"cpu", "device"}`` µs), when the capture joined a Kineto trace."""
        return self._input().get("original_us")

    def _input(self) -> Dict[str, Any]:
        """The expanded input config (an empty dict when there is none)."""
        config_input = self.config.get("input") if isinstance(self.config, dict) else None
        return config_input if isinstance(config_input, dict) else {}

    @classmethod
    def from_fields(cls, fields: Dict[str, Any]) -> "RunRecord":
        """Rebuild a record from ``dataclasses.asdict`` output (records cross process bounds)."""
        fields = dict(fields)
        fields["passes"] = [PassResult(**p) for p in fields.get("passes", [])]
        if fields.get("error") is not None:
            fields["error"] = RunError(**fields["error"])
        return cls(**fields)

    @classmethod
    def from_json(cls, record: Dict[str, Any]) -> "RunRecord":
        """A record back from its JSON form (a results file's run or step line): what
        ``to_json`` wrote it from, so that records of several processes combine as the
        measured ones do (``results.combine``)."""
        metric = record.get("metric") if isinstance(record.get("metric"), dict) else {}
        stats = record.get("stats") if isinstance(record.get("stats"), dict) else {}
        rates = record.get("throughput") if isinstance(record.get("throughput"), dict) else {}
        passes = [PassResult.from_json(name, values, stats.get(name), rates.get(name))
                  for name, values in metric.items() if isinstance(values, dict)
                  and isinstance(values.get("measure.time"), list)
                  and (values["measure.time"] or record.get("status") == STATUS_OK)]
        error = record.get("error")
        target = record.get("target")
        return cls(str(record.get("op_name")), str(record.get("id")), record.get("config"),
                   record.get("status", STATUS_OK), passes,
                   RunError(str(error.get("type")), str(error.get("message")),
                            str(error.get("phase"))) if isinstance(error, dict) else None,
                   {k: v for k, v in target.items() if k in ("metric", "value", "pass")}
                   if isinstance(target, dict) else None,
                   record.get("verify"), None, record.get("canary_drift"), record.get("step"),
                   _comms_of(record.get("comms")))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"kind": KIND_STEP if self.step is not None else KIND_RUN,
                               "op_name": self.op_name, "id": self.id, "status": self.status}
        config_input = self._input()  # a captured config's count and original time, if any
        count, original_us = config_input.get("count"), config_input.get("original_us")
        if count is not None:
            out["count"] = count
        if original_us is not None:
            out["original_us"] = original_us
        if self.passes:  # an error record keeps the passes measured before the failure
            stats = self.stats()
            out["metric"] = {p.name: p.metric() for p in self.passes}
            out["stats"] = stats
            throughput = {p.name: p.throughput(stats[p.name]["median"] if stats[p.name] else None)
                          for p in self.passes}
            if any(throughput.values()):
                out["throughput"] = throughput
            noisy = [name for name, s in stats.items() if is_noisy(s)]
            if noisy:
                out["noisy"] = noisy
            if self.disturbed():
                out["disturbed"] = True
            if self.canary_drift is not None:
                out["canary_drift"] = self.canary_drift
            if self.target is not None:
                out["target"] = evaluate_target(self.target, stats, throughput)
        else:
            out["metric"] = self._unmeasured_metric()
        if self.verify is not None:
            out["verify"] = self.verify
        if self.error is not None:
            out["error"] = {"type": self.error.type, "message": self.error.message,
                            "phase": self.error.phase}
            if self.error.phase == "backward" and "backward" not in out["metric"]:
                out["metric"]["backward"] = PassResult("backward", [], []).metric()
        if self.step is not None:
            out["step"] = self.step
        if self.comms is not None:
            median = (out.get("stats") or {}).get("forward") or {}
            out["comms"] = comms_json(self.comms, median.get("median"))
        out["config"] = self.config
        return out

    def _unmeasured_metric(self) -> Dict[str, Any]:
        """A planned run's metric is empty, as PARAM's with no iteration; a run that failed
        before measuring anything has the forward pass's keys with empty lists."""
        if self.status == STATUS_DRY_RUN:
            return {}
        name = "step" if self.step is not None else "forward"  # the pass it would have had
        return {name: PassResult(name, [], []).metric()}


def comms_json(comms: Dict[str, Any], median_ms: Any) -> Dict[str, Any]:
    """A collective record's ``comms``: what was moved, and the algorithm and bus bandwidths
    (GB/s) at the median, as nccl-tests defines them."""
    from param_compute.operators.collectives import KINDS, bandwidth

    kind = KINDS.get(comms.get("kind"))
    out = {key: comms[key] for key in ("kind", "group", "ranks", "bytes") if key in comms}
    if kind is not None and isinstance(comms.get("bytes"), int):
        rates = bandwidth(kind, comms["bytes"], comms.get("ranks") or 1,
                          median_ms if isinstance(median_ms, (int, float)) else None)
        out["algbw_gbps"], out["busbw_gbps"] = rates["algbw_gbps"], rates["busbw_gbps"]
    return out


def _comms_of(value: Any) -> Optional[Dict[str, Any]]:
    if not isinstance(value, dict):
        return None
    return {key: value[key] for key in ("kind", "group", "ranks", "bytes") if key in value}


#: PARAM's string forms of its pass and execution-mode enums, as its results header writes them.
def add_param_header_keys(header: Dict[str, Any], cmd_args: Dict[str, Any]) -> Dict[str, Any]:
    """Put PARAM's header keys beside ours that are not run options (in place; returns
    ``header``): ``run_options.cmd_args`` (the command line's values) and
    ``sys_info.param_train_compute_version`` (our version). PARAM's run-option keys
    (``pass_type``, ``op_exec_mode``...) are in ``RunOptions.to_json`` already.
    """
    options = header.setdefault("run_options", {})
    options["cmd_args"] = cmd_args
    info = header.setdefault("sys_info", {})
    info["param_train_compute_version"] = info.get("param_compute_version", "unknown")
    return header
