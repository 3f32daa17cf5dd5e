"""The words ``synthetic-repos`` builds its repositories from, and their fixed train / held-out split.

Every name a generated repository defines (its package, its modules, the nouns inside its function
names, its vendored library) comes from one of the pools below. Each pool is split once, by a hash
of the word under a fixed salt: a quarter of every pool is held out. The split does not depend on
the suite's ``seed``, so a fresh held-out draw (another seed) still shares no package, file path,
function name or library with any training draw; the seed only chooses which instances are drawn.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import keyword
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COINERS", "NAME_MODES", "POOLS", "Words", "coin", "coin_english", "coin_random", "plural", "split_of", "split_pool"]

_SALT = "codemoe/synthetic-repos/vocabulary/v1"
HELDOUT_SHARE = 4  # one word in this many is held out

POOLS: dict[str, tuple[str, ...]] = {
    "package": (
        "inventory", "billing", "shipping", "payroll", "library", "garden", "weather", "transit", "kitchen",
        "clinic", "hotel", "parking", "studio", "museum", "harbor", "orchard", "bakery", "cinema", "school",
        "tournament", "voting", "warehouse", "fleet", "airport", "ledger", "recipes", "census", "survey",
        "mailroom", "arcade", "vineyard", "brewery", "observatory", "aquarium", "stadium", "pharmacy",
        "bookshop", "florist", "railway", "ferry",
    ),
    "module": (
        "core", "ops", "guards", "calc", "helpers", "records", "engine", "metrics", "tools", "logic", "model",
        "policy", "service", "planner", "registry", "checks", "summary", "store", "catalog", "schedule",
        "convert", "quotas", "counters", "reports",
    ),
    "noun": (
        "widget", "shipment", "parcel", "ticket", "visit", "booking", "shift", "gauge", "score", "batch", "crate",
        "pallet", "voucher", "fare", "invoice", "loan", "token", "badge", "lap", "dose", "tray", "slot",
        "seat", "room", "plant", "sample", "entry", "permit", "trip", "route", "label", "coupon", "bottle",
        "carton", "member", "guest", "patient", "fixture", "heat", "stamp", "meter", "lesson", "course",
        "packet", "bundle", "drone", "cargo", "vote",
    ),
    "library": (
        "numfmt", "pairkit", "textops", "quickcsv", "unitlib", "datekit", "moneyfmt", "keyval", "strtools",
        "tinyparse", "fmtlite", "splitlib",
    ),
}


def split_of(word: str) -> str:
    """'heldout' for one word in :data:`HELDOUT_SHARE` (by hash), else 'train'; the same on every machine."""
    digest = int(hashlib.sha256(f"{_SALT}:{word}".encode()).hexdigest(), 16)
    return "heldout" if digest % HELDOUT_SHARE == 0 else "train"


def split_pool(kind: str, split: str) -> tuple[str, ...]:
    """The words of pool ``kind`` in ``split``, in the pool's order."""
    return tuple(word for word in POOLS[kind] if split_of(word) == split)


def plural(noun: str) -> str:
    """English plural of a pool noun: ``batch`` -> ``batches``, ``entry`` -> ``entries``."""
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


# a coined name is none of these, in either form a family writes
_ALL_WORDS = frozenset(form for pool in POOLS.values() for word in pool for form in (word, plural(word)))
_ORDER = 2  # letters of context in the chain that coins names


@functools.cache
def _letter_chain() -> dict[str, tuple[str, ...]]:
    """For every two-letter context, the letters that ever follow it in the train split's pool words
    ('^' starts a word, '$' ends it). Built from train words only: nothing of the held-out
    vocabulary goes into a coined name."""
    chain: dict[str, list[str]] = {}
    for kind in POOLS:
        for word in split_pool(kind, "train"):
            padded = "^" * _ORDER + word + "$"
            for i in range(_ORDER, len(padded)):
                chain.setdefault(padded[i - _ORDER:i], []).append(padded[i])
    # each follower once: drawn uniformly, names are varied rather than the commonest pairs again
    return {context: tuple(sorted(set(letters))) for context, letters in chain.items()}


@functools.cache
def _heldout_words() -> tuple[str, ...]:
    """Held-out words a coined name may not contain (three letters, like ``ops``, occur in any text)."""
    return tuple(word for kind in POOLS for word in split_pool(kind, "heldout") if len(word) >= 4)


@functools.cache
def _first_order_chain() -> dict[str, tuple[str, ...]]:
    """For every letter, the letters that ever follow it in the train split's pool words: where a
    noisy letter (:func:`coin`'s ``noise``) left a two-letter context no train word has."""
    chain: dict[str, set[str]] = {}
    for kind in POOLS:
        for word in split_pool(kind, "train"):
            padded = "^" + word + "$"
            for i in range(1, len(padded)):
                chain.setdefault(padded[i - 1], set()).add(padded[i])
    return {letter: tuple(sorted(followers)) for letter, followers in chain.items()}


def coin(rng: random.Random, noise: float = 0.0) -> str:
    """A made-up word that reads like the pool words (``garehop``), never a pool word.

    Coined names are what teaches a policy to copy: a repository named by words nobody has seen
    before can only be worked on by reading its names off the context, never by recalling them.
    They are drawn letter by letter from the train words' letter pairs, so they are spelled (and
    tokenized) like English words, as held-out names are; thousands of them exist.

    ``noise``: each letter after the first is drawn uniformly from a-z with this probability instead
    (``garewhop``). The ~100 train words' letter pairs are a narrow prior: a held-out word with a pair
    they lack (``brewery``'s ``ew``, ``railway``'s ``lw``) spells a token no coined name ever has, so
    no action learned to write it and the policy cannot copy it. Letters off the prior (a letter in
    ten in ``agentic-repos``) make every letter one that is written because the context says so.
    """
    chain, first = _letter_chain(), _first_order_chain()
    return _walk(lambda context: rng.choice(chain.get(context) or first.get(context[-1]) or _ENDINGS),
                 shortest=7, rng=rng, noise=noise)


_ENDINGS = (*string.ascii_lowercase, "$")  # after a letter no train word has: any letter, or the end


def _walk(next_letter: Callable[[str], str], shortest: int, rng: random.Random, noise: float = 0.0) -> str:
    """A word drawn letter by letter (``next_letter`` of the last two letters, '$' ends it) until one
    of ``shortest`` to 11 letters is a name a repository may use (:func:`_usable`). With ``noise``,
    each letter after the first is instead drawn uniformly from a-z (with ``rng``) at that rate."""
    start = "^" * _ORDER
    while True:
        word, context = "", start
        while len(word) < 12:
            if noise > 0 and context != start and rng.random() < noise:
                letter = rng.choice(string.ascii_lowercase)
            else:
                letter = next_letter(context)
            if letter == "$":
                break
            word += letter
            context = (context + letter)[-_ORDER:]
        if shortest <= len(word) <= 11 and _usable(word):
            return word


def _usable(word: str) -> bool:
    """Not a pool word (in either form), not a keyword, holding no held-out word."""
    return word not in _ALL_WORDS and not keyword.iskeyword(word) and not any(held in word for held in _heldout_words())


@functools.cache
def _english_chain() -> dict[str, tuple[tuple[str, ...], tuple[int, ...]]]:
    """For every two-letter context, the letters that follow it in the words of
    ``data/english_words.txt`` (5,000 words of the Python standard library, no pool word), each with
    how many words it follows that context in: English spelling statistics."""
    from importlib.resources import files

    text = files("codemoe.evals").joinpath("data/english_words.txt").read_text(encoding="utf-8")
    counts: dict[str, collections.Counter[str]] = {}
    for word in (line for line in text.splitlines() if line and not line.startswith("#")):
        padded = "^" * _ORDER + word + "$"
        for i in range(_ORDER, len(padded)):
            counts.setdefault(padded[i - _ORDER:i], collections.Counter())[padded[i]] += 1
    return {context: (tuple(c), tuple(c.values())) for context, c in sorted(counts.items())}


def coin_english(rng: random.Random, noise: float = 0.0) -> str:
    """A made-up word spelled like English (``thresolve``): letter by letter from the letter pairs of
    5,000 English words, weighted as often as they occur. :func:`coin`'s chain knows the ~100 train
    pool words only, so its names follow a few letter pairs far more than English does, and a policy
    that learned them expects those pairs where a held-out word has others; these names' statistics
    are English's. Never a pool word, a keyword, or a name holding a held-out word. ``noise``: as
    :func:`coin`'s."""
    chain = _english_chain()

    def next_letter(context: str) -> str:
        followers = chain.get(context)  # none after a noisy letter English never has there
        return rng.choices(*followers)[0] if followers else rng.choice(_ENDINGS)

    return _walk(next_letter, shortest=6, rng=rng, noise=noise)


def coin_random(rng: random.Random, noise: float = 0.0) -> str:
    """A made-up name of 6 to 10 letters drawn uniformly (``qzmvtkro``): unlike :func:`coin`'s, no
    letter of it follows from the ones before, so nothing learned from other names predicts it and
    only copying it from the context writes it. Never a keyword, never holding a held-out word.
    ``noise`` changes nothing: every letter is uniform already."""
    while True:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(6, 10)))
        if _usable(word):
            return word


# how each made-up naming coins a word; 'words' draws from the pools instead
COINERS: dict[str, Callable[[random.Random, float], str]] = {"coined": coin, "english": coin_english, "random": coin_random}
NAME_MODES = ("words", *COINERS)


@dataclass
class Words:
    """Draws names for one repository from one split's pools (distinct within the repository).

    A made-up naming (``names`` in :data:`COINERS`, e.g. 'coined', :func:`coin`) coins every name instead: no pool word, so nothing of either
    split's vocabulary, occurs in the repository.
    """

    rng: random.Random
    split: str
    names: str = "words"
    noise: float = 0.0  # a made-up naming's share of letters drawn uniformly (see :func:`coin`)

    def pick(self, kind: str, count: int = 1) -> list[str]:
        """``count`` distinct words of pool ``kind`` in this split (or coined words)."""
        make = COINERS.get(self.names)
        if make is not None:
            coined: list[str] = []
            while len(coined) < count:
                word = make(self.rng, self.noise)
                if word not in coined:
                    coined.append(word)
            return coined
        pool = split_pool(kind, self.split)
        if len(pool) < count:
            raise ValueError(f"vocabulary pool {kind!r} has {len(pool)} {self.split} words, {count} needed")
        return self.rng.sample(pool, count)

    def one(self, kind: str) -> str:
        return self.pick(kind)[0]
