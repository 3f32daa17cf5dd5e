"""Money amounts are integers of cents."""

CURRENCY = "EUR"


def cents(amount: str) -> int:
    """Parse '12.34' into 1234."""
    whole, _, frac = amount.partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


def fmt(value: int) -> str:
    sign = "-" if value < 0 else ""
    whole, frac = divmod(abs(value), 100)
    return f"{sign}{whole:,}.{frac:02d} {CURRENCY}"
