import random
import time

from wordplay.anagrams import group_anagrams


def test_groups():
    assert group_anagrams(["listen", "Tea", "silent", "eat", "x", "Enlist"]) == [
        ["listen", "silent", "Enlist"], ["Tea", "eat"], ["x"]]


def test_fast_enough():
    rng = random.Random(0)
    words = ["".join(rng.sample("abcdefghijklmnopqrstuvwxyz", 7)) for _ in range(1500)]
    start = time.perf_counter()
    groups = group_anagrams(words)
    assert time.perf_counter() - start < 0.15
    assert sum(len(g) for g in groups) == 1500
