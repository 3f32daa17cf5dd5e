import logging

import pytest


def test_version():
    from client.deps import retrykit

    assert retrykit.__version__ == "2.0"


def test_logs_attempts(caplog):
    from client.fetch import fetch_with_retry

    calls = []

    def fn():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError
        return 42

    with caplog.at_level(logging.INFO, logger="client.fetch"):
        assert fetch_with_retry(fn, attempts=4) == 42
    assert "fetched after 3 attempts" in caplog.text


def test_other_errors_are_not_retried():
    from client.fetch import fetch_with_retry

    calls = []

    def fn():
        calls.append(1)
        raise KeyError("bad")

    with pytest.raises(KeyError):
        fetch_with_retry(fn, attempts=5)
    assert len(calls) == 1
