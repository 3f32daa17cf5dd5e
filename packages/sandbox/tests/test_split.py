"""Known answers for the literal values that cross between the asserts checker and the program."""

from __future__ import annotations

import collections
import math

import pytest
from codemoe.sandbox.split import decode, encode, referenced_names


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2**200, 3**9000, 1.5, -0.0, 1e308, "", "é\n\"", b"\x00\xff", bytearray(b"ab"),
    1 + 2j, [1, [2, (3,)]], (), {1, 2}, frozenset({"a"}), {1: "a", (1, 2): [None], "k": {"n": 1.0}},
])
def test_literals_round_trip_with_their_exact_types(value):
    back = decode(encode(value))
    expected = bytes(value) if isinstance(value, bytearray) else value
    assert back == expected and type(back) is type(expected)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


def test_non_finite_floats_round_trip():
    assert math.isnan(decode(encode(float("nan"))))
    assert decode(encode(float("-inf"))) == float("-inf")


def test_subclasses_cross_as_their_plain_value_without_what_they_override():
    class Liar(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    class Upper(str):
        def __str__(self):
            return "forged"

    class Sneaky(list):
        def __iter__(self):
            return iter(["forged"])

    back = decode(encode([Liar(3), Upper("x"), Sneaky([1, 2]), collections.Counter("aab"),
                          collections.namedtuple("P", "x y")(1, 2), collections.OrderedDict(b=1)]))
    assert back == [3, "x", [1, 2], {"a": 2, "b": 1}, (1, 2), {"b": 1}]
    assert [type(v) for v in back] == [int, str, list, dict, tuple, dict]
    assert back[0] != 4


@pytest.mark.parametrize("value", [object(), iter([1]), (x for x in ()), len, type, {1: object()}])
def test_what_is_not_a_literal_is_refused_with_a_clear_error(value):
    with pytest.raises(TypeError, match="not a literal value"):
        encode(value)


def test_nesting_is_bounded_both_ways():
    deep: list = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(TypeError, match="nested too deeply"):
        encode(deep)
    data: object = 1
    for _ in range(300):
        data = {"l": [data]}
    with pytest.raises(ValueError, match="nested too deeply"):
        decode(data)


@pytest.mark.parametrize("data", [{"q": []}, {"l": 1}, {"l": [], "t": []}, [1], {"d": [[1]]}, {"c": ["a", 1]}])
def test_malformed_data_is_a_value_error(data):
    with pytest.raises(ValueError):
        decode(data)


def test_referenced_names_cover_nested_functions_and_classes():
    code = compile("import math\ndef check(c):\n    def inner():\n        return helper(1)\n"
                   "    class K:\n        v = CONST\n    assert c(2) == math.pi\ncheck(entry)\n", "checks.py", "exec")
    assert {"helper", "CONST", "math", "entry", "check"} <= set(referenced_names(code))
