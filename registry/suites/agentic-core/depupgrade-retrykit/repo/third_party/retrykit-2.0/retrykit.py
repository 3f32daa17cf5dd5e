"""retrykit 2.0: call a function again when it raises.

Changes since 1.4: the ``times`` argument is now ``attempts`` and is keyword-only; ``retry``
records what happened in the returned :class:`Outcome` (``value`` and ``attempts`` used)
instead of returning the bare value. ``exceptions`` is unchanged.
"""

from dataclasses import dataclass

__version__ = "2.0"


@dataclass
class Outcome:
    value: object
    attempts: int


def retry(fn, *, attempts=3, exceptions=(Exception,)):
    """Call ``fn()`` up to ``attempts`` times; the last exception propagates."""
    for attempt in range(1, attempts + 1):
        try:
            return Outcome(fn(), attempt)
        except exceptions:
            if attempt == attempts:
                raise
