"""Fetching with retries."""

import logging

from client.deps import retrykit

log = logging.getLogger(__name__)


def fetch_with_retry(fn, attempts: int = 3):
    """``fn()``'s value, calling it up to ``attempts`` times while it raises ConnectionError."""
    return retrykit.retry(fn, times=attempts, exceptions=(ConnectionError,))
