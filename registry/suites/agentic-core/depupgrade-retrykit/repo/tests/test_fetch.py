import pytest

from client.fetch import fetch_with_retry


def flaky(failures):
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= failures:
            raise ConnectionError("down")
        return "payload"

    return fn, calls


def test_first_try():
    fn, calls = flaky(0)
    assert fetch_with_retry(fn) == "payload"
    assert len(calls) == 1


def test_uses_all_attempts():
    fn, calls = flaky(4)
    assert fetch_with_retry(fn, attempts=5) == "payload"
    assert len(calls) == 5


def test_gives_up():
    fn, calls = flaky(10)
    with pytest.raises(ConnectionError):
        fetch_with_retry(fn, attempts=2)
    assert len(calls) == 2
