import time

from collections_extra import dedupe


def test_equal_items_of_different_types():
    assert dedupe([1, 1.0, True, "1", (1,), (1,)]) == [1, "1", (1,)]


def test_strings_fast():
    words = [f"w{i % 3000}" for i in range(9000)]
    start = time.perf_counter()
    result = dedupe(words)
    assert time.perf_counter() - start < 0.1
    assert result == [f"w{i}" for i in range(3000)]


def test_generator_input():
    assert dedupe(x % 3 for x in range(10)) == [0, 1, 2]
