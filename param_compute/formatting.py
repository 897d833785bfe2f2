"""Human-readable numbers shared by the console summary, ``compare`` and ``report``."""

from __future__ import annotations

from typing import Optional


def format_ms(value: Optional[float], missing: str = "-") -> str:
    """A time given in milliseconds, in the unit that reads best (ms or µs)."""
    if value is None:
        return missing
    if value >= 100:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.3f} ms"
    return f"{value * 1000:.2f} µs"
