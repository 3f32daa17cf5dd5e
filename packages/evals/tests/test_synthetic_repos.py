"""The ``synthetic-repos`` generator: distinct instances at scale, determinism, and splits that share no vocabulary.

These tests read what the generator draws (no sandbox); ``tests/test_synthetic_repos.py`` validates
generated tasks and replays reference trajectories in the real sandbox.
"""

from __future__ import annotations

import collections
import itertools
import random
import re
import string

import pytest
from codemoe.evals.repo_families import FAMILIES, plural
from codemoe.evals.repo_vocabulary import POOLS, coin, coin_english, coin_random, split_of, split_pool
from codemoe.evals.synthetic_repos import SyntheticReposConfig, SyntheticReposSuite, draw_instances, unified_diff

GENERIC_PATHS = {"pyproject.toml", "README.md", "vendor/__init__.py"}  # the same in every repository that has them


def _draw(split: str, seed: int = 0, count: int = 270, train_names: str = "words"):
    config = SyntheticReposConfig(seed=seed, train_tasks=count, heldout_tasks=count, train_names=train_names)
    return draw_instances(config, split)


def _words(instance) -> set[str]:
    """Every word of the repository's text, its statement and its clarification, ``snake_case`` split too."""
    text = " ".join([*instance.files.values(), *instance.hidden.values(), *instance.gold.values(),
                     *instance.files, instance.statement, instance.clarification or ""])
    tokens = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    return tokens | {part for token in tokens for part in token.split("_") if part}


def _plural_forms(word: str) -> set[str]:
    return {word, word + "s", word + "es", word[:-1] + "ies"}


def test_thousands_of_distinct_instances_in_every_family():
    train = _draw("train", count=2000)
    assert len(train) == 2000 and len({tid for tid, _ in train}) == 2000
    assert len({inst.key() for _, inst in train}) == 2000  # no two repositories with the same files and fix
    counts = collections.Counter(inst.type for _, inst in train)
    assert set(counts) == set(FAMILIES) and max(counts.values()) - min(counts.values()) <= 1
    kinds = collections.Counter((inst.type, inst.kind) for _, inst in train)
    bug_kinds = {kind for family, kind in kinds if family == "test-driven-bug-fix"}
    assert bug_kinds == {"wrong-operator", "off-by-one", "wrong-constant", "missing-case"}


def test_the_same_config_draws_the_same_tasks_and_a_split_does_not_depend_on_its_size():
    first, again = _draw("heldout", count=90), _draw("heldout", count=90)
    assert [(tid, inst.files, inst.gold, inst.hidden) for tid, inst in first] == \
           [(tid, inst.files, inst.gold, inst.hidden) for tid, inst in again]
    bigger = _draw("heldout", count=180)
    by_family = lambda drawn: {f: [tid for tid, i in drawn if i.type == f] for f in FAMILIES}  # noqa: E731
    small, large = by_family(first), by_family(bigger)
    assert all(large[f][: len(small[f])] == small[f] for f in FAMILIES)


def test_no_heldout_package_path_function_or_library_appears_in_training():
    train = [inst for _, inst in _draw("train", count=900)]
    for seed in (0, 1):
        heldout = [inst for _, inst in _draw("heldout", seed=seed, count=270)]
        for key in ("package", "functions", "library"):
            seen = set().union(*(inst.names.get(key, set()) for inst in train))
            held = set().union(*(inst.names.get(key, set()) for inst in heldout))
            assert held and not seen & held if key != "library" or held else True, (key, seen & held)
        train_paths = set().union(*(inst.names["paths"] for inst in train)) - GENERIC_PATHS
        held_paths = set().union(*(inst.names["paths"] for inst in heldout)) - GENERIC_PATHS
        assert held_paths and not train_paths & held_paths
        layouts = {frozenset(inst.files) for inst in train}
        assert not any(frozenset(inst.files) in layouts for inst in heldout)


def test_no_word_of_the_heldout_vocabulary_occurs_in_a_training_repository_and_back():
    held_words = set().union(*(_plural_forms(w) for kind in POOLS for w in split_pool(kind, "heldout")))
    train_words = set().union(*(_plural_forms(w) for kind in POOLS for w in split_pool(kind, "train")))
    for _, inst in _draw("train", count=450):
        assert not _words(inst) & held_words, (inst.type, _words(inst) & held_words)
    for _, inst in _draw("heldout", seed=3, count=180):
        assert not _words(inst) & train_words, (inst.type, _words(inst) & train_words)


@pytest.mark.parametrize("mode", ["coined", "english", "random"])
def test_coined_train_names_share_no_word_with_any_pool_and_almost_none_with_each_other(mode):
    all_words = {form for words in POOLS.values() for w in words for form in (w, plural(w))}
    held = [w for kind in POOLS for w in split_pool(kind, "heldout") if len(w) >= 4]  # 'ops' is in 'stops'

    coined = _draw("train", count=450, train_names=mode)
    for _, inst in coined:
        assert not _words(inst) & all_words, (inst.type, _words(inst) & all_words)
        assert not any(h in name for h in held for names in inst.names.values() for name in names), inst.names
    packages = collections.Counter(next(iter(inst.names["package"])) for _, inst in coined)
    assert len(packages) >= 0.85 * len(coined)  # most repositories are named by words never seen before
    # the held-out split is unchanged: the same tasks as with pool words for training
    assert [tid for tid, _ in _draw("heldout", count=45, train_names=mode)] == [tid for tid, _ in _draw("heldout", count=45)]
    # the draw is as deterministic as the pool-word one, and every coined task fails where it says
    assert [tid for tid, _ in coined[:30]] == [tid for tid, _ in _draw("train", count=30, train_names=mode)]
    assert all(inst.fail_to_pass for _, inst in coined)


def test_english_names_are_spelled_like_english():
    names = [coin_english(random.Random(seed)) for seed in range(2000)]
    assert all(6 <= len(n) <= 11 and n.isalpha() and n.islower() for n in names)
    assert len(set(names)) > 0.95 * len(names)
    # English spelling: a 'q' is followed by a 'u', bar the library's 'sqrt' and a few like it
    after_q = [n[i + 1] for n in names for i in range(len(n) - 1) if n[i] == "q"]
    assert len(after_q) >= 10 and after_q.count("u") >= 0.8 * len(after_q)
    # and far more of English's letter pairs than the chain of ~100 pool words knows (484 against 194)
    pairs = {a + b for n in names for a, b in itertools.pairwise(n)}
    coined_pairs = {a + b for seed in range(2000) for a, b in itertools.pairwise(coin(random.Random(seed)))}
    assert len(pairs) > 2 * len(coined_pairs)


def test_random_names_are_letters_no_name_predicts():
    names = [coin_random(random.Random(seed)) for seed in range(2000)]
    assert all(6 <= len(n) <= 10 and n.isalpha() and n.islower() for n in names)
    # uniform letters: every letter about as often after "e" as after any other (a coined name's chain
    # would put a few followers far ahead); 26 letters, so about 1/26 each
    follows = collections.Counter(b for n in names for a, b in itertools.pairwise(n) if a == "e")
    assert len(follows) == 26 and max(follows.values()) < 3 * min(follows.values())


def test_name_noise_puts_letter_pairs_the_train_words_lack_into_coined_names():
    chain_pairs = {a + b for kind in POOLS for w in split_pool(kind, "train") for a, b in itertools.pairwise(w)}
    plain = [coin(random.Random(seed)) for seed in range(2000)]
    assert plain == [coin(random.Random(seed), 0.0) for seed in range(2000)]  # no noise: the draw as before
    noisy = [coin(random.Random(seed), 0.1) for seed in range(2000)]
    assert all(7 <= len(n) <= 11 and n.isalpha() and n.islower() for n in noisy)
    assert len(set(noisy)) > len(set(plain))  # more varied than the chain alone
    # without noise every letter pair is one of the train words'; with it, some pairs of about one
    # name in two are not (a letter in ten drawn off the chain, most of them making a new pair)
    assert all(a + b in chain_pairs for n in plain for a, b in itertools.pairwise(n))
    off = [n for n in noisy if any(a + b not in chain_pairs for a, b in itertools.pairwise(n))]
    assert 0.25 * len(noisy) < len(off) < 0.75 * len(noisy)
    # every letter gets written, not only the train words' (brewery's 'w' after an 'e', say)
    assert set("".join(noisy)) == set(string.ascii_lowercase)
    assert any("ew" in n for n in noisy) and not any("ew" in n for n in plain)


def test_name_noise_changes_training_names_only_and_is_checked():
    def draw(split, noise, count=45):
        return draw_instances(SyntheticReposConfig(train_tasks=count, heldout_tasks=count, train_names="coined",
                                                   name_noise=noise), split)

    held = [inst for _, inst in _draw("heldout", count=45)]
    assert [(i.files, i.gold) for _, i in draw("heldout", 0.2)] == [(i.files, i.gold) for i in held]
    plain, noisy = draw("train", 0.0), draw("train", 0.2)
    assert [tid for tid, _ in plain] == [tid for tid, _ in _draw("train", count=45, train_names="coined")]
    assert [tid for tid, _ in noisy] != [tid for tid, _ in plain]
    all_words = {form for words in POOLS.values() for w in words for form in (w, plural(w))}
    heldout_words = [w for kind in POOLS for w in split_pool(kind, "heldout") if len(w) >= 4]
    for _, inst in noisy:  # still no pool word, nothing holding a held-out word
        assert not _words(inst) & all_words
        assert not any(h in name for h in heldout_words for names in inst.names.values() for name in names)
    fmt = object()
    roots = {SyntheticReposSuite(SyntheticReposConfig(train_names="coined", name_noise=n), fmt).root.name
             for n in (0.0, 0.1, 0.2)}
    assert len(roots) == 3  # folders of another noise are never reused
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="name_noise"):
            SyntheticReposSuite(SyntheticReposConfig(train_names="coined", name_noise=bad), fmt)
    with pytest.raises(ValueError, match="name_noise acts on made-up train names"):  # pool words have no letters to draw
        SyntheticReposSuite(SyntheticReposConfig(train_names="words", name_noise=0.1), fmt)


def test_another_seed_draws_a_fresh_heldout_set():
    zero, one = {tid for tid, _ in _draw("heldout", 0, 180)}, {tid for tid, _ in _draw("heldout", 1, 180)}
    assert len(zero & one) <= 18  # a few small families may draw the same repository again; most are new


def test_the_vocabulary_split_is_fixed_and_every_pool_has_heldout_words():
    for kind, words in POOLS.items():
        held = split_pool(kind, "heldout")
        assert held and len(held) < len(words) / 2, kind
        assert set(held) | set(split_pool(kind, "train")) == set(words)
    assert split_of("inventory") == split_of("inventory")


def test_every_instance_fails_where_it_says_and_its_gold_patch_is_a_diff_of_it():
    for _, inst in _draw("train", count=90):
        assert inst.fail_to_pass and all("::" in t for t in inst.fail_to_pass + inst.pass_to_pass)
        assert all(not t.startswith("hidden_tests/") or t.split("::")[0][len("hidden_tests/"):] in inst.hidden
                   for t in inst.fail_to_pass + inst.pass_to_pass)
        patch = unified_diff(inst.files, {**inst.files, **inst.gold})
        assert patch.startswith("--- a/") and all(f"+++ b/{path}" in patch for path in inst.gold)
        assert bool(inst.decoy) == (inst.type == "multi-round-error-correction")
        assert (inst.clarification is not None) == (inst.type == "clarification-needed")


def test_bad_options_name_the_key():
    with pytest.raises(ValueError, match=r"unknown families \['refactor'\]; valid: test-driven-bug-fix"):
        SyntheticReposSuite(SyntheticReposConfig(families=["refactor"]), task_format=None)
    with pytest.raises(ValueError, match="train_tasks must be >= 0, got -1"):
        SyntheticReposSuite(SyntheticReposConfig(train_tasks=-1), task_format=None)
    with pytest.raises(ValueError, match="train_names must be one of words, coined, english, random, got 'made-up'"):
        SyntheticReposSuite(SyntheticReposConfig(train_names="made-up"), task_format=None)
    with pytest.raises(ValueError, match="step_budget must be >= 5, got 2"):
        SyntheticReposSuite(SyntheticReposConfig(step_budget=2), task_format=None)
    with pytest.raises(ValueError, match="unknown split 'test'"):
        _draw("test")
