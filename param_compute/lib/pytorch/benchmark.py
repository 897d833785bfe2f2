"""PARAM's ``lib.pytorch.benchmark``: run every operator of a loaded ``BenchmarkConfig``.

``make_default_benchmark(bench_config).run()`` runs the config through the engine itself
(validation, expansion, building, data, timing: what ``run_benchmark`` does) with the config's
``run_options``, writing one results line per run to ``run_options["out_stream"]`` when set.
Runs failing become error records in the stream, as on the command line.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from param_compute.runtime.options import RunOptions
from param_compute.lib.config import BenchmarkConfig
from param_compute.results.sinks.base import RecordSink
from param_compute.lib.init_helper import get_logger
from param_compute.lib.pytorch.config_util import init_pytorch


class _StreamSink(RecordSink):
    """Writes each run's record, as one JSON line, to a PARAM ``out_stream``."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.records: List[Dict[str, Any]] = []

    def start(self, total: Optional[int]) -> None:
        pass

    def run_done(self, run: Any, record: Any) -> None:
        if record is None:
            return
        line = record.to_json()
        self.records.append(line)
        if self.stream is not None:
            self.stream.write(json.dumps(line) + "\n")
            self.stream.flush()

    def finish(self, summary: Any) -> None:
        pass


class Benchmark:
    """Runs a ``BenchmarkConfig``. ``build_executor`` is accepted for PARAM's signature: the
    engine builds and runs every config itself."""

    def __init__(self, bench_config: BenchmarkConfig, build_executor: Any = None):
        init_pytorch(bench_config.run_options)
        self.bench_config = bench_config
        self.run_options = bench_config.run_options
        self.build_executor = build_executor
        self.records: List[Dict[str, Any]] = []
        self.summary = None

    def run(self) -> None:
        names = [config.name for config in self.bench_config.op_configs]
        spec = {name: self.bench_config.bench_config[name] for name in names}
        if not spec:
            get_logger().warning("no operator to run")
            return
        from param_compute.pipeline.session import run

        sink = _StreamSink(self.run_options.get("out_stream"))
        self.summary = run(spec, RunOptions.from_param(self.run_options), sinks=[sink]).summary
        self.records = sink.records


def make_default_benchmark(bench_config: BenchmarkConfig) -> Benchmark:
    return Benchmark(bench_config)
