"""datefmt 2.0: tiny date formatting.

Changes since 1.0: ``format_date(value, pattern)`` was removed; build a ``Formatter(pattern)``
once and call its ``format(value)``. New token: ``{q}`` (quarter, 1-4).
"""

__version__ = "2.0"

_TOKENS = {"YYYY": "%Y", "MM": "%m", "DD": "%d"}


class Formatter:
    """A compiled date pattern with YYYY, MM, DD and {q} tokens."""

    def __init__(self, pattern):
        self.pattern = pattern

    def format(self, value):
        out = self.pattern
        for token, directive in _TOKENS.items():
            out = out.replace(token, value.strftime(directive))
        return out.replace("{q}", str((value.month - 1) // 3 + 1))
