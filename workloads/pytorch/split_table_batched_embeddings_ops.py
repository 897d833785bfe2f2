"""fbgemm_gpu's table-batched embedding bags (``SplitTableBatchedEmbeddingBagsCodegen``).

Three plugins, under PARAM's names so that PARAM's ``split_table_batched_embeddings_ops.json``
runs unchanged:

* the operator: builds ``num_tables`` embedding tables in one fbgemm module (on the host for a CPU
  run, in device memory for a CUDA run) and runs its forward, and its backward with the fused
  optimizer update;
* the input iterator: crosses each input entry's ``batch_size`` and ``pooling_factor`` values
  (``__range__``: an inclusive ``[start, stop, step]``; ``__list__``: a list of values) and merges
  each pair with the build's table description, because generating the indices needs both;
* the data generator: random indices, offsets and (for weighted tables) per-sample weights.

The iterator and the data generator are plain Python and torch, so they stay registered when
fbgemm_gpu is missing; only the operator is then declared unavailable.
"""

import copy
import functools
import importlib.util
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from param_compute.plugins.interfaces import ConfigIterator, DataGenerator, OperatorInterface
from param_compute.plugins.registry import (
                                            register_config_iterator,
                                            register_data_generator,
                                            register_operator,
                                            register_unavailable_operators,
                                            )

# fbgemm_gpu is optional: without it only the operator is missing, and specs naming it fail
# validation with FBGEMM_UNAVAILABLE as the reason. Its import costs about a second, so it is only
# looked up here and imported when the operator is first built.
FBGEMM_UNAVAILABLE: Optional[str] = (
    None if importlib.util.find_spec("fbgemm_gpu") is not None
    else "fbgemm_gpu is not installed (pip install fbgemm-gpu-cpu==1.8.0)")


def _fbgemm() -> SimpleNamespace:
    """The fbgemm_gpu names the operator uses (imported on first use)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
                                                                      ComputeDevice,
                                                                      EmbeddingLocation,
                                                                      PoolingMode,
                                                                      )
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                                                                        SplitTableBatchedEmbeddingBagsCodegen,
                                                                        )

    return SimpleNamespace(EmbOptimType=EmbOptimType, SparseType=SparseType,
                           ComputeDevice=ComputeDevice, EmbeddingLocation=EmbeddingLocation,
                           PoolingMode=PoolingMode, Codegen=SplitTableBatchedEmbeddingBagsCodegen)


OPERATOR_NAME = "SplitTableBatchedEmbeddingBagsCodegen"

_META_ATTRS = ("__copy__", "__range__", "__list__")

#: Bytes per weight of fbgemm's ``SparseType`` names (the memory guard's estimate).
_PRECISION_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
                    "int2": 0.25}

# Positions in the build args: num_tables, rows, dim, pooling, weighted, weights_precision.
_BUILD_NUM_TABLES, _BUILD_ROWS, _BUILD_DIM, _BUILD_WEIGHTED, _BUILD_PRECISION = 0, 1, 2, 4, 5

# Positions in the merged input args the iterator yields (PARAM's layout).
_NUM_TABLES, _ROWS, _BATCH_SIZE, _POOLING_FACTOR, _WEIGHTED = 0, 1, 3, 4, 5


def _without_meta(arg: Dict[str, Any]) -> Dict[str, Any]:
    return {key: value for key, value in copy.deepcopy(arg).items() if key not in _META_ATTRS}


def _arg_values(arg: Dict[str, Any]) -> Sequence[Any]:
    """The values one input arg takes: a ``__range__`` or ``__list__`` expands, else just one.

    As in PARAM's iterator, the presence of ``__range__`` alone means ``value`` holds an
    inclusive ``[start, stop]`` or ``[start, stop, step]`` range. A range stays a lazy ``range``
    (counting a billion batch sizes costs nothing; only the runs actually reached are made).
    """
    value = arg.get("value")
    if "__range__" in arg:
        if not isinstance(value, list) or len(value) not in (2, 3) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError(f"__range__ needs integer value [start, stop] or [start, stop, step], "
                             f"got {value!r}")
        start, stop, step = (list(value) + [1])[:3]
        if step <= 0:
            raise ValueError(f"__range__ step must be positive, got {step}")
        return range(start, stop + 1, step)
    if "__list__" in arg:
        if not isinstance(value, list):
            raise ValueError(f"__list__ needs a list value, got {value!r}")
        return list(value)
    return [value]


def _input_args(input_config: Dict[str, Any]) -> List[Dict[str, Any]]:
    args = input_config.get("args") or []
    if len(args) != 2:
        raise ValueError(f"{OPERATOR_NAME} inputs take two args, batch_size and pooling_factor; "
                         f"got {len(args)}")
    return args


class SplitTableBatchedEmbeddingBagsCodegenInputIterator(ConfigIterator):
    """Yields ``("<entry>_<combination>", merged config)`` for every input combination.

    The merged args are PARAM's: num_tables, rows, dim (from the build), batch_size,
    pooling_factor (from the input), weighted, weights_precision (from the build); kwargs empty.
    Unlike PARAM, whose entry index stays 0, the first id part counts the input entries, so ids
    stay unique when a spec has several.
    """

    def __init__(self, configs: Dict[str, Any], key: str, device: str):
        super().__init__(configs, key, device)
        build = configs.get("build")
        if not build or len(build.get("args") or []) < 6:
            raise ValueError(f"{OPERATOR_NAME} needs a build config with six args: num_tables, rows, "
                             "dim, pooling, weighted, weights_precision")
        self._table_args = [_without_meta(arg) for arg in build["args"]]
        self._generator = self._generate()

    def _generate(self) -> Iterator[Tuple[str, Dict[str, Any]]]:
        tables = self._table_args
        for entry_id, input_config in enumerate(self.configs[self.key]):
            batch_arg, pooling_arg = _input_args(input_config)
            pooling_values = _arg_values(pooling_arg)
            combinations = ((b, p) for b in _arg_values(batch_arg) for p in pooling_values)
            for combination_id, (batch_size, pooling_factor) in enumerate(combinations):
                batch = dict(_without_meta(batch_arg), value=batch_size)
                pooling = dict(_without_meta(pooling_arg), value=pooling_factor)
                args = [tables[_BUILD_NUM_TABLES], tables[_BUILD_ROWS], tables[_BUILD_DIM], batch,
                        pooling, tables[_BUILD_WEIGHTED], tables[_BUILD_PRECISION]]
                yield f"{entry_id}_{combination_id}", {"args": copy.deepcopy(args), "kwargs": {}}

    def __next__(self) -> Tuple[str, Dict[str, Any]]:
        return next(self._generator)

    @classmethod
    def count(cls, configs: Dict[str, Any], key: str) -> Optional[int]:
        total = 0
        for input_config in configs[key]:
            batch_arg, pooling_arg = _input_args(input_config)
            total += len(_arg_values(batch_arg)) * len(_arg_values(pooling_arg))
        return total


def _per_table(value: Any, num_tables: int, what: str) -> List[int]:
    """A per-table list from a scalar (shared by all tables) or a list of ``num_tables`` values."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * num_tables
    if len(values) != num_tables:
        raise ValueError(f"{what}: {len(values)} values for {num_tables} tables")
    return [int(v) for v in values]


class SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator(DataGenerator):
    """Forward args ``[indices, offsets, per_sample_weights or None]`` for one merged config.

    Every table gets ``batch_size`` bags of ``pooling_factor`` indices drawn uniformly from its
    rows (fbgemm takes table-local row ids); ``offsets`` delimits the ``num_tables * batch_size``
    bags, table-major, as fbgemm expects. Everything is drawn on the CPU from torch's global
    generator, which the engine seeds, so the data do not depend on the run device.

    PARAM also let the spec name ``torch.save`` files of recorded indices; that is deliberately
    not supported: a spec is data and never makes the engine open (or unpickle) files.
    """

    def estimate_bytes(self, config: Dict[str, Any]) -> int:
        """The memory guard's hook: int64 indices for every bag of every table, the offsets and
        float32 per-sample weights (nothing in the config is a tensor spec)."""
        args = config["args"]
        num_tables = int(args[_NUM_TABLES]["value"])
        batch_size = int(args[_BATCH_SIZE]["value"])
        pooling = _per_table(args[_POOLING_FACTOR]["value"], num_tables, "pooling_factor")
        indices = batch_size * sum(pooling)
        weights = indices * 4 if args[_WEIGHTED]["value"] else 0
        return indices * 8 + (num_tables * batch_size + 1) * 8 + weights

    def get_data(self, config: Dict[str, Any], device: str) -> Tuple[List[Any], Dict[str, Any]]:
        args = config["args"]
        num_tables = int(args[_NUM_TABLES]["value"])
        rows = _per_table(args[_ROWS]["value"], num_tables, "rows")
        batch_size = int(args[_BATCH_SIZE]["value"])
        pooling_factors = _per_table(args[_POOLING_FACTOR]["value"], num_tables, "pooling_factor")
        weighted = bool(args[_WEIGHTED]["value"])
        target = torch.device(device)

        indices = torch.cat([
            torch.randint(0, table_rows, (batch_size * pooling,), dtype=torch.int64)
            for table_rows, pooling in zip(rows, pooling_factors)
        ])
        lengths = torch.tensor(pooling_factors, dtype=torch.int64).repeat_interleave(batch_size)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        weights = torch.randn(indices.numel(), dtype=torch.float32) if weighted else None
        return [indices.to(target), offsets.to(target),
                weights.to(target) if weights is not None else None], {}


class SplitTableBatchedEmbeddingBagsCodegenOp(OperatorInterface):
    """One fbgemm table-batched embedding bag module; backward applies the fused optimizer.

    The output requires grad through fbgemm's autograd function, so the base class's
    ``create_grad`` (ones like the pooled output) and ``backward`` apply as they are.
    """

    def __init__(self) -> None:
        self.op: Optional[Callable[..., torch.Tensor]] = None

    def build(self, num_tables: int, rows: Any, dim: Any, pooling: int, weighted: bool,
              weights_precision: str, optimizer: str = "exact_row_wise_adagrad") -> None:
        # ``weighted`` only shapes the inputs (per-sample weights); the module is the same.
        fb = _fbgemm()
        EmbeddingLocation, ComputeDevice = fb.EmbeddingLocation, fb.ComputeDevice
        if self.device.startswith("cpu"):
            location, compute_device = EmbeddingLocation.HOST, ComputeDevice.CPU
        elif self.device.startswith("cuda"):
            location, compute_device = EmbeddingLocation.DEVICE, ComputeDevice.CUDA
        else:
            raise ValueError(f"{OPERATOR_NAME} runs on cpu or cuda, not {self.device!r}")
        specs = [(table_rows, table_dim, location, compute_device)
                 for table_rows, table_dim in zip(_per_table(rows, num_tables, "rows"),
                                                  _per_table(dim, num_tables, "dim"))]
        self.op = fb.Codegen(
            specs,
            optimizer=fb.EmbOptimType(optimizer),
            pooling_mode=fb.PoolingMode(pooling),
            weights_precision=fb.SparseType(weights_precision),
            stochastic_rounding=True,
            device=torch.device(self.device),
        )

    def estimate_build_bytes(self, num_tables: int, rows: Any, dim: Any, pooling: int,
                             weighted: bool, weights_precision: str, *_: Any, **__: Any) -> int:
        """The memory guard's hook: every table's weights at their precision plus a row-wise
        optimizer state (one float32 per row)."""
        item = _PRECISION_BYTES.get(str(weights_precision).lower(), 4)
        rows = _per_table(rows, num_tables, "rows")
        dims = _per_table(dim, num_tables, "dim")
        return int(sum(r * d * item + r * 4 for r, d in zip(rows, dims)))

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor,
                per_sample_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.op(indices, offsets, per_sample_weights)

    def bind_forward(self, args: List[Any], kwargs: Dict[str, Any]) -> Callable[[], Any]:
        return functools.partial(self.op, *args, **kwargs)

    def cleanup(self) -> None:
        super().cleanup()
        self.op = None


register_config_iterator("SplitTableBatchedEmbeddingBagsCodegenInputIterator",
                         SplitTableBatchedEmbeddingBagsCodegenInputIterator)
register_data_generator("SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator",
                        SplitTableBatchedEmbeddingBagsCodegenInputDataGenerator)
if FBGEMM_UNAVAILABLE is None:
    register_operator(OPERATOR_NAME, SplitTableBatchedEmbeddingBagsCodegenOp)
else:
    register_unavailable_operators([OPERATOR_NAME], FBGEMM_UNAVAILABLE)
