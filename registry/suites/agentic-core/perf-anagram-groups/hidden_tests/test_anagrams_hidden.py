import random
import time

from wordplay.anagrams import group_anagrams, is_anagram


def test_same_output_as_pairwise_definition():
    rng = random.Random(7)
    words = ["".join(rng.choice("abcAB") for _ in range(3)) for _ in range(200)]
    expected = []
    for word in words:
        for group in expected:
            if is_anagram(group[0], word):
                group.append(word)
                break
        else:
            expected.append([word])
    assert group_anagrams(words) == expected


def test_large_distinct_words_fast():
    rng = random.Random(1)
    words = ["".join(rng.sample("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 6)) for _ in range(1000)]
    start = time.perf_counter()
    groups = group_anagrams(words)
    assert time.perf_counter() - start < 0.1
    assert sum(len(g) for g in groups) == 1000


def test_empty():
    assert group_anagrams([]) == []
