import random
import time

from wordplay.anagrams import group_anagrams


def test_groups():
    assert group_anagrams(["listen", "Tea", "silent", "eat", "x", "Enlist"]) == [
        ["listen", "silent", "Enlist"], ["Tea", "eat"], ["x"]]


def test_fast_enough():
    rng = random.Random(0)
    words = ["".join(rng.sample("abcdefghijklmnopqrstuvwxyz", 7)) for _ in range(800)]
    start = time.perf_counter()
    groups = group_anagrams(words)
    assert time.perf_counter() - start < 0.1
    assert sum(len(g) for g in groups) == 800
