"""The micro-batch benchmarks' report: each side's median against one forward, printed and saved."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable

__all__ = ["report"]


def report(seconds: dict[int, list[float]], units: str, json_path: str | None,
           extra: tuple[str, Callable[[float], str]] | None = None) -> None:
    """``seconds[N]``: the timed steps in forwards of N rows (0: one forward, the anchor). Prints a
    row per side (``extra``: a column's title and its cell from the median) and writes one case
    per N > 0 (codemoe's median, the anchor's, their ratio, ``units``) to ``json_path``."""
    anchor = statistics.median(seconds[0])
    title = f" {extra[0]:>16}" if extra else ""
    print(f"{'micro_batch_size':<18} {'s/step':>8}{title} {'x one forward':>14}")
    results = {}
    for size, times in seconds.items():
        median = statistics.median(times)
        cell = f" {extra[1](median):>16}" if extra else ""
        print(f"{size or 'whole batch':<18} {median:>8.3f}{cell} {anchor / median:>14.2f}")
        if size:
            results[f"micro_batch_{size}"] = {"codemoe": median, "anchor": anchor, "ratio": anchor / median, "units": units}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=2)
