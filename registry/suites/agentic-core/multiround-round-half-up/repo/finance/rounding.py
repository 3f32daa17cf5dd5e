"""Rounding rules for money."""


def round_half_up(value: float, ndigits: int = 0) -> float:
    """Round ``value`` to ``ndigits`` decimals, halves away from zero."""
    return round(value, ndigits)
