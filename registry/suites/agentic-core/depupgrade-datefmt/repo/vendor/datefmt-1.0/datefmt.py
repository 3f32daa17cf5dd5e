"""datefmt 1.0: tiny date formatting."""

__version__ = "1.0"

_TOKENS = {"YYYY": "%Y", "MM": "%m", "DD": "%d"}


def format_date(value, pattern):
    """Format a date with YYYY, MM and DD tokens."""
    out = pattern
    for token, directive in _TOKENS.items():
        out = out.replace(token, value.strftime(directive))
    return out
