"""The function templates behind the ``synthetic`` suite, grouped in families.

A template is a one- or two-line Python body with integer, character or word parameters; one
choice of parameters is one *function* (``mul_add_3_4``: ``return x * 3 + 4``). Bodies are short and
regular on purpose: a model of a few million parameters must learn to read the constants from the
description and put them in the right place, which is what generalising to held-out functions takes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["FAMILIES", "TEMPLATES", "Template"]

_DIGITS = tuple(range(1, 10))
_FACTORS = tuple(range(2, 10))
_CHARS = ("a", "b", "c", "d", "e")
_WORDS = ("ab", "ok", "xy", "end", "go", "hi")


@dataclass(frozen=True)
class Template:
    """A family of functions that differ only in their constants.

    ``description`` and ``body`` are ``str.format`` patterns over ``params``; body lines are
    indented one level inside the function (further indentation is written in the line itself).
    """

    family: str  # the family this template belongs to
    name: str  # base of the entry point; parameters are appended: mul_add_3_4
    args: tuple[tuple[str, str], ...]  # (argument name, input kind) with kinds int, str, list
    returns: str  # return annotation
    description: str  # first docstring line, a format pattern over params
    body: tuple[str, ...]  # body lines, format patterns over params
    params: dict[str, tuple[object, ...]] = field(default_factory=dict)  # parameter -> choices
    distinct: bool = False  # skip assignments where two parameters are equal (a no-op replace)

    def choices(self) -> Iterator[dict[str, object]]:
        """Every parameter assignment, in a fixed order."""
        names = list(self.params)
        for values in itertools.product(*(self.params[n] for n in names)):
            if not self.distinct or len(set(values)) == len(values):
                yield dict(zip(names, values))

    def entry_point(self, params: dict[str, object]) -> str:
        return "_".join([self.name, *(str(params[n]) for n in self.params)])


def _t(
    family: str,
    name: str,
    args: str,
    returns: str,
    description: str,
    body: str | tuple[str, ...],
    distinct: bool = False,
    **params: tuple[object, ...],
) -> Template:
    kinds = {"x": "int", "s": "str", "xs": "list"}
    arg_names = tuple(a.strip() for a in args.split(","))
    lines = (body,) if isinstance(body, str) else body
    return Template(
        family=family,
        name=name,
        args=tuple((a, kinds[a]) for a in arg_names),
        returns=returns,
        description=description,
        body=lines,
        params={k: tuple(v) for k, v in params.items()},
        distinct=distinct,
    )


TEMPLATES: tuple[Template, ...] = (
    # arithmetic on one integer
    _t("arithmetic", "add", "x", "int", "Return x plus {a}.", "return x + {a}", a=_DIGITS),
    _t("arithmetic", "sub", "x", "int", "Return x minus {a}.", "return x - {a}", a=_DIGITS),
    _t("arithmetic", "mul", "x", "int", "Return x times {a}.", "return x * {a}", a=_FACTORS),
    _t(
        "arithmetic",
        "mul_add",
        "x",
        "int",
        "Return x times {a} plus {b}.",
        "return x * {a} + {b}",
        a=_FACTORS,
        b=_DIGITS,
    ),
    _t(
        "arithmetic",
        "add_mul",
        "x",
        "int",
        "Return x plus {a}, times {b}.",
        "return (x + {a}) * {b}",
        a=_DIGITS,
        b=_FACTORS,
    ),
    _t("arithmetic", "mod", "x", "int", "Return x modulo {a}.", "return x % {a}", a=_FACTORS),
    _t("arithmetic", "div", "x", "int", "Return x divided by {a}, rounded down.", "return x // {a}", a=_FACTORS),
    _t("arithmetic", "square_add", "x", "int", "Return x squared plus {a}.", "return x * x + {a}", a=_DIGITS),
    # strings
    _t("strings", "repeat", "s", "str", "Return s repeated {a} times.", "return s * {a}", a=(2, 3, 4)),
    _t("strings", "head", "s", "str", "Return the first {a} characters of s.", "return s[:{a}]", a=(1, 2, 3, 4, 5)),
    _t(
        "strings", "tail", "s", "str", "Return s without its first {a} characters.", "return s[{a}:]", a=(1, 2, 3, 4, 5)
    ),
    _t("strings", "append", "s", "str", "Return s followed by '{w}'.", "return s + '{w}'", w=_WORDS),
    _t("strings", "prepend", "s", "str", "Return '{w}' followed by s.", "return '{w}' + s", w=_WORDS),
    _t("strings", "count", "s", "int", "Return how many times '{c}' occurs in s.", "return s.count('{c}')", c=_CHARS),
    _t(
        "strings",
        "replace",
        "s",
        "str",
        "Return s with every '{c}' replaced by '{d}'.",
        "return s.replace('{c}', '{d}')",
        True,
        c=_CHARS,
        d=_CHARS,
    ),
    _t(
        "strings", "strip", "s", "str", "Return s without the character '{c}'.", "return s.replace('{c}', '')", c=_CHARS
    ),
    _t("strings", "len_add", "s", "int", "Return the length of s plus {a}.", "return len(s) + {a}", a=_DIGITS),
    _t("strings", "starts", "s", "bool", "Return True if s starts with '{c}'.", "return s.startswith('{c}')", c=_CHARS),
    # lists of integers
    _t(
        "lists",
        "map_add",
        "xs",
        "list",
        "Return each element of xs plus {a}.",
        "return [v + {a} for v in xs]",
        a=_DIGITS,
    ),
    _t(
        "lists",
        "map_mul",
        "xs",
        "list",
        "Return each element of xs times {a}.",
        "return [v * {a} for v in xs]",
        a=_FACTORS,
    ),
    _t(
        "lists",
        "keep_gt",
        "xs",
        "list",
        "Return the elements of xs greater than {a}.",
        "return [v for v in xs if v > {a}]",
        a=_DIGITS,
    ),
    _t(
        "lists",
        "keep_lt",
        "xs",
        "list",
        "Return the elements of xs less than {a}.",
        "return [v for v in xs if v < {a}]",
        a=_DIGITS,
    ),
    _t("lists", "sum_add", "xs", "int", "Return the sum of xs plus {a}.", "return sum(xs) + {a}", a=_DIGITS),
    _t(
        "lists",
        "count_gt",
        "xs",
        "int",
        "Return how many elements of xs are greater than {a}.",
        "return len([v for v in xs if v > {a}])",
        a=_DIGITS,
    ),
    _t("lists", "take", "xs", "list", "Return the first {a} elements of xs.", "return xs[:{a}]", a=(1, 2, 3, 4)),
    _t("lists", "drop", "xs", "list", "Return xs without its first {a} elements.", "return xs[{a}:]", a=(1, 2, 3, 4)),
    _t(
        "lists",
        "map_mod",
        "xs",
        "list",
        "Return each element of xs modulo {a}.",
        "return [v % {a} for v in xs]",
        a=_FACTORS,
    ),
    # conditionals
    _t("conditionals", "at_most", "x", "int", "Return x, but at most {a}.", "return min(x, {a})", a=_DIGITS),
    _t("conditionals", "at_least", "x", "int", "Return x, but at least {a}.", "return max(x, {a})", a=_DIGITS),
    _t("conditionals", "above", "x", "bool", "Return True if x is greater than {a}.", "return x > {a}", a=_DIGITS),
    _t(
        "conditionals",
        "divisible",
        "x",
        "bool",
        "Return True if x is divisible by {a}.",
        "return x % {a} == 0",
        a=_FACTORS,
    ),
    _t("conditionals", "dist", "x", "int", "Return the distance between x and {a}.", "return abs(x - {a})", a=_DIGITS),
    _t(
        "conditionals",
        "pick",
        "x",
        "int",
        "Return {b} if x is greater than {a}, else {c}.",
        ("if x > {a}:", "    return {b}", "return {c}"),
        True,
        a=(0, 2, 4, 6),
        b=_DIGITS,
        c=(0, 1, 2, 3),
    ),
    _t(
        "conditionals",
        "big_small",
        "x",
        "str",
        "Return 'big' if x is greater than {a}, else 'small'.",
        "return 'big' if x > {a} else 'small'",
        a=_DIGITS,
    ),
)

FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(t.family for t in TEMPLATES))
