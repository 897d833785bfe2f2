"""Does a replay of Adam's ``exp_avg_sq.sqrt()`` run at the real state's speed with ``zero_rows``?

The real side is Adam's ``exp_avg_sq`` of a 10000 x 256 embedding table after one step in
which 600 rows at random places (6%) were looked up: the other rows stay exactly 0 (94% zeros,
all of them in whole rows). Its ``value_profile`` is captured as a live capture would
(``capture.live.value_profile``), and the replay's tensor is generated from it by the default data
generator (``data.generator``, seeded as a run is) twice: with the captured ``zero_rows`` and
with that key dropped (zeros scattered element by element, as before it existed). Each side
is timed as ``torch.sqrt(x)`` with torch.utils.benchmark at one thread, the sides interleaved
round by round, each round gated on a free core (``wait_quiet``), medians over rounds.
Informational rows: the same zeros as one block of rows (a vocabulary sorted by frequency),
and ordinary values.

Target: generated with ``zero_rows`` within +-15% of the real state. Table printed; exit
status 0 on a pass, 1 on a miss.

    nice -n 10 python bench/value_rows.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from _common import median, pin_threads, print_table, torch_ms, verdict, wait_quiet  # noqa: E402
from param_compute.capture.live.value_profile import value_profile  # noqa: E402
from param_compute.data.generator import materialize, seed_generators  # noqa: E402

ROWS, WIDTH, TOUCHED = 10000, 256, 600
TOLERANCE = 0.15
ROUNDS = 7


def adam_state() -> torch.Tensor:
    """``exp_avg_sq`` of an embedding table after one Adam step over TOUCHED random rows."""
    gen = torch.Generator().manual_seed(0)
    table = torch.nn.Embedding(ROWS, WIDTH)
    optimizer = torch.optim.Adam(table.parameters(), lr=1e-3)
    ids = torch.randperm(ROWS, generator=gen)[:TOUCHED]
    (table(ids) * torch.randn(TOUCHED, WIDTH, generator=gen)).sum().backward()
    optimizer.step()
    return optimizer.state[table.weight]["exp_avg_sq"].detach().clone()


def generated(profile: dict, seed: int = 1) -> torch.Tensor:
    seed_generators(seed)
    spec = {"type": "tensor", "dtype": "float", "shape": [ROWS, WIDTH],
            "value_profile": profile, "requires_grad": False}
    return materialize(spec, "cpu")


def fractions(tensor: torch.Tensor):
    zero = tensor == 0
    return float(zero.float().mean()), float(zero.all(1).float().mean())


def main() -> int:
    pin_threads()
    real = adam_state()
    profile = value_profile(real)
    scattered = {key: value for key, value in profile.items() if key != "zero_rows"}
    block = torch.zeros(ROWS, WIDTH)
    block[:TOUCHED] = real[real.ne(0).any(1)]  # the same rows, first
    cases = {"real Adam exp_avg_sq (rows at random)": real,
             "generated, zero_rows (this change)": generated(profile),
             "generated, without zero_rows": generated(scattered),
             "info: same rows as one block": block,
             "info: ordinary values (no zeros)": generated({})}
    times = {name: [] for name in cases}
    unquiet = 0
    for _ in range(ROUNDS):
        for name, tensor in cases.items():
            unquiet += not wait_quiet()
            times[name].append(torch_ms(torch.sqrt, (tensor,), min_run_time=0.3))
    real_ms = median(times[next(iter(cases))])
    rows, ok = [], True
    for name, tensor in cases.items():
        ms = median(times[name])
        zeros, zero_rows = fractions(tensor)
        ratio = ms / real_ms
        if name.startswith("generated, zero_rows"):
            passed = abs(ratio - 1) <= TOLERANCE
            ok &= passed
            target = f"±{TOLERANCE:.0%}  {verdict(passed)}"
        else:
            target = ""
        rows.append((name, f"{zeros:.3f}", f"{zero_rows:.3f}", f"{ms:.2f}", f"{ratio:.2f}",
                     target))
    print_table(f"torch.sqrt over {ROWS}x{WIDTH} float32, 1 thread, median of {ROUNDS} rounds "
                f"(captured profile {profile}; {unquiet} steps without a free core)",
                ["layout", "zeros", "zero rows", "ms", "/ real", "target"], rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
