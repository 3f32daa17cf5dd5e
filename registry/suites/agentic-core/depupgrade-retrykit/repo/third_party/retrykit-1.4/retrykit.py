"""retrykit 1.4: call a function again when it raises."""

__version__ = "1.4"


def retry(fn, times=3, exceptions=(Exception,)):
    """Call ``fn()`` up to ``times`` times until it returns without raising."""
    for attempt in range(1, times):
        try:
            return fn()
        except exceptions:
            if attempt == times - 1:
                raise
    return fn()
