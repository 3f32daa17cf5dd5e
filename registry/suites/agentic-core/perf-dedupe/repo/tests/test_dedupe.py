import time

from collections_extra import dedupe


def test_order_kept():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_fast_on_large_input():
    items = list(range(4000)) * 2
    start = time.perf_counter()
    result = dedupe(items)
    assert time.perf_counter() - start < 0.1
    assert result == list(range(4000))
