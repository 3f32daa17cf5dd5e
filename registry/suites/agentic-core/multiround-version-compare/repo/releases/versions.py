"""Comparing release versions like '1.2.3' and '2.0.0-rc1'."""


def is_newer(candidate: str, current: str) -> bool:
    """True when ``candidate`` is a later release than ``current``."""
    return candidate > current
