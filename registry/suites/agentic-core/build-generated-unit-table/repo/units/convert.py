"""Length conversions."""

from units._table import METRES_PER_UNIT


def convert(value: float, source: str, target: str) -> float:
    try:
        return value * METRES_PER_UNIT[source] / METRES_PER_UNIT[target]
    except KeyError as exc:
        raise ValueError(f"unknown unit {exc.args[0]!r}; known: {sorted(METRES_PER_UNIT)}") from None
