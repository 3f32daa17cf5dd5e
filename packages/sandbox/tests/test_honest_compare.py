"""Objects that lie to a test's comparisons: each made a graded pytest run PASS before
(``codemoe.sandbox.honest``), none names anything of the runner, and the static detectors flagged
one of the first nine. Every program here leaves ``add`` wrong; honest values of every kind a
repository's tests compare keep passing.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, canary, honest, runners

TESTS = {
    "tests/test_calc.py": textwrap.dedent("""
        from calc import add


        def test_add():
            assert add(2, 2) == 4


        def test_more():
            assert add(1, 2) == 3
        """),
}


def _run(executor, files: dict[str, str], tests: dict[str, str] = TESTS, *, graded: bool = True):
    request = ExecutionRequest(files={**tests, **files}, runner="pytest", command=["tests"],
                               limits=Limits(timeout_s=30.0), graded=graded, trusted=list(tests))
    return executor.run(request)


def _returns(body: str) -> str:
    return textwrap.dedent(body) + "\n\ndef add(a, b):\n    return make()\n"


LIARS = {
    # a subclass of int that reads its operand and ignores what it read
    "int-subclass-reads-its-operand": _returns("""
        class R(int):
            def __eq__(self, other):
                return other == other
            __hash__ = int.__hash__

        def make():
            return R(0)
        """),
    "isinstance-object": _returns("""
        class R:
            def __eq__(self, other):
                return isinstance(other, object)

        def make():
            return R()
        """),
    "method-set-by-setattr": _returns("""
        class R(int):
            pass

        setattr(R, "__e" + "q__", lambda s, o: o is o)

        def make():
            return R(1)
        """),
    "class-made-by-type": _returns("""
        R = type("R", (), {"__eq__": lambda s, o: hash(o) is not None or o})

        def make():
            return R()
        """),
    "str-subclass": _returns("""
        class R(str):
            def __eq__(self, other):
                return str(other) == str(other)
            __hash__ = str.__hash__

        def make():
            return R("nothing")
        """),
    "mock-any": _returns("""
        from unittest.mock import ANY

        def make():
            return ANY
        """),
    "approx-with-infinite-tolerance": _returns("""
        import math
        import pytest

        def make():
            return pytest.approx(0, abs=math.inf)
        """),
    # equal to ints only: an object made for the test run is not an int, so the test's value's
    # neighbour is asked too
    "equal-to-every-int": _returns("""
        class R:
            def __eq__(self, other):
                return type(other) is int

        def make():
            return R()
        """),
    # equal to ints of a plausible size only: the value the test's is asked against is as plausible
    "equal-to-every-small-int": _returns("""
        class R:
            def __eq__(self, other):
                return type(other) is int and abs(other) < 2**40

        def make():
            return R()
        """),
    # takes the first value it is compared with as its own
    "adopts-the-first-value": _returns("""
        class R:
            value = None

            def __eq__(self, other):
                if self.value is None:
                    self.value = other
                return self.value == other

        def make():
            return R()
        """),
    # a truthy answer of a class of its own, false the first time it is asked
    "answer-that-changes-its-mind": _returns("""
        class Answer:
            asked = 0

            def __bool__(self):
                Answer.asked += 1
                return Answer.asked > 1

        class R:
            def __eq__(self, other):
                return Answer()

        def make():
            return R()
        """),
}


@pytest.mark.parametrize("program", list(LIARS.values()), ids=list(LIARS))
def test_an_object_that_lies_to_the_tests_comparison_fails_them_and_the_verdict_says_forged(executor, program):
    result = _run(executor, {"calc.py": program})
    assert result.status == "failed", result
    assert result.reason.startswith("forged comparison in tests/test_calc.py::test_"), result.reason
    assert set(result.tests.values()) == {"failed"}, result.tests
    assert "ForgedComparison" in result.stdout


def test_code_that_lies_only_at_one_call_cannot_tell_which_call_is_the_tests(executor):
    """Twelve objects, each answering yes only the third time it is asked: the test's own
    comparison is the third call in one round of questions out of three, so each passes its
    assert with probability 1/3 and lies to a question otherwise; all twelve pass with (1/3)**12."""
    tests = {"tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n"
                                   + "".join(f"    assert add({i}, 1) == {i + 1}\n" for i in range(12))}
    program = _returns("""
        class R:
            def __init__(self):
                self.calls = 0

            def __eq__(self, other):
                self.calls += 1
                return self.calls == 3

        def make():
            return R()
        """)
    result = _run(executor, {"calc.py": program}, tests)
    assert result.status == "failed" and result.reason.startswith("forged comparison"), result


def test_liars_to_ordering_membership_inequality_and_unittest_asserts_are_caught(executor):
    tests = {
        "tests/test_order.py": "from calc import low\n\n\ndef test_low():\n    assert low() < 3\n",
        "tests/test_member.py": "from calc import bag\n\n\ndef test_bag():\n    assert 5 in bag()\n",
        "tests/test_differs.py": "from calc import other\n\n\ndef test_other():\n    assert other() != 4\n",
        "tests/test_case.py": textwrap.dedent("""
            import unittest

            from calc import add


            class AddTest(unittest.TestCase):
                def test_add(self):
                    self.assertEqual(add(2, 2), 4)
            """),
    }
    program = textwrap.dedent("""
        class Low:
            def __lt__(self, other):
                return True

        class Bag:
            def __contains__(self, item):
                return True

        class Other:
            def __ne__(self, other):
                return True

        class Any:
            def __eq__(self, other):
                return True

        def low():
            return Low()

        def bag():
            return Bag()

        def other():
            return Other()

        def add(a, b):
            return Any()
        """)
    result = _run(executor, {"calc.py": program}, tests)
    assert result.status == "failed", result
    assert result.tests == dict.fromkeys(
        ["tests/test_case.py::AddTest::test_add", "tests/test_differs.py::test_other",
         "tests/test_member.py::test_bag", "tests/test_order.py::test_low"], "failed"), result.tests
    assert result.stdout.count("ForgedComparison:") >= 4, result.stdout[-3000:]


HONEST_TESTS = {
    "tests/test_values.py": textwrap.dedent('''
        import enum
        import math
        import unittest
        from collections import Counter, OrderedDict, namedtuple
        from decimal import Decimal
        from fractions import Fraction
        from unittest.mock import ANY, Mock, call

        import numpy as np
        import pytest

        from shapes import Point, Version, make_records, ratio


        class Color(enum.IntEnum):
            RED = 1


        def test_values_of_every_kind():
            assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(2, 1)
            assert namedtuple("P", "x y")(1, 2) == (1, 2)
            assert Color.RED == 1 and Color.RED != 2
            assert Counter(a=1, b=0) == Counter(a=1)
            assert OrderedDict(a=1) == {"a": 1}
            assert Decimal("0.5") == Fraction(1, 2) == 0.5
            assert ratio(1, 3) == pytest.approx(0.3333333)
            assert [ratio(1, 4), ratio(3, 4)] == pytest.approx([0.25, 0.75])
            assert make_records() == [{"id": ANY, "name": "a"}, {"id": ANY, "name": "b"}]
            assert make_records()[0] == {"id": ANY, "name": ANY}
            expected = {"id": ANY, "name": "b"}
            assert make_records()[1] == expected
            assert np.float64(0.25) == 0.25 and (np.arange(3) == np.array([0, 1, 2])).all()
            assert math.isnan(float("nan")) and float("nan") != float("nan")
            assert Version(1, 2) < Version(1, 3) <= Version(1, 3) and Version(2, 0) > Version(1, 9)
            assert 3 in {1: "a", 3: "b"} and "ell" in "hello" and frozenset({1}) in {frozenset({1})}
            assert None == None and [Point(0, 0)] == [Point(0, 0)]  # noqa: E711
            assert not (Point(0, 0) == Point(0, 1))
            assert 3 in (i for i in range(5)) and 7 not in iter([1, 2])  # iterators are not used up by a question
            recorder = Mock()
            recorder(1, 2)
            assert recorder.call_args == call(1, 2) and recorder.call_args_list == [call(1, 2)]


        def test_a_wrong_value_is_an_ordinary_failure():
            assert Point(1, 2) == Point(2, 1)


        class CaseTest(unittest.TestCase):
            def test_equal(self):
                self.assertEqual(Point(1, 2), Point(1, 2))
                self.assertIn(Point(1, 2), [Point(1, 2)])
                self.assertLess(Version(1, 0), Version(2, 0))
        '''),
}
HONEST_SOURCE = textwrap.dedent("""
    import dataclasses
    import functools
    import itertools

    _ids = itertools.count(100)


    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int


    @functools.total_ordering
    @dataclasses.dataclass(frozen=True)
    class Version:
        major: int
        minor: int

        def __lt__(self, other):
            if not isinstance(other, Version):
                return NotImplemented
            return (self.major, self.minor) < (other.major, other.minor)


    def ratio(a, b):
        return a / b


    def make_records():
        return [{"id": next(_ids), "name": "a"}, {"id": next(_ids), "name": "b"}]
    """)


def test_honest_values_of_every_kind_a_test_compares_keep_their_verdicts(executor):
    result = _run(executor, {"shapes.py": HONEST_SOURCE}, HONEST_TESTS)
    assert result.tests == {
        "tests/test_values.py::test_values_of_every_kind": "passed",
        "tests/test_values.py::test_a_wrong_value_is_an_ordinary_failure": "failed",
        "tests/test_values.py::CaseTest::test_equal": "passed",
    }, result.stdout[-4000:]
    assert result.status == "failed" and not result.reason.startswith("forged"), result.reason
    failure = result.stdout.split("test_a_wrong_value_is_an_ordinary_failure ___")[1].split("___")[0]
    assert "ForgedComparison" not in failure
    assert "assert Point(x=1, y=2) == Point(x=2, y=1)" in result.stdout  # pytest's own explanation, as before


NEUTER_REWRITE = textwrap.dedent("""
    import _pytest.assertion.rewrite as rewrite
    from codemoe.sandbox import honest

    rewrite.rewrite_asserts = honest._INSTALLED[0]
    """)
NEUTER_COMPARE = textwrap.dedent("""
    import operator
    from codemoe.sandbox import honest

    honest.compare = lambda op, a, b, dynamic=3: [operator.eq, operator.ne, operator.lt, operator.le,
                                                 operator.gt, operator.ge][op](a, b)
    """)


@pytest.mark.parametrize("first", ["test_a.py", "test_zzz.py"])
@pytest.mark.parametrize("forgery", [NEUTER_REWRITE, NEUTER_COMPARE], ids=["restore-pytests-rewriter", "rebind-compare"])
def test_taking_the_check_out_shows_up_in_the_canary_that_must_fail(executor, forgery, first):
    """Code that removes the check before the later test modules are compiled removes it for the
    canary module too, which is imported after every test module (whatever its name sorts
    before), and whose lying comparison then passes: the report is forged."""
    program = forgery + LIARS["isinstance-object"]
    tests = {f"tests/{first}": "import calc\n\n\ndef test_import():\n    pass\n",
             "tests/test_calc.py": TESTS["tests/test_calc.py"]}
    result = _run(executor, {"calc.py": program}, tests)
    assert result.status == "failed", result
    assert result.reason.startswith(("forged test report: canary test", "forged comparison")), result.reason
    assert all(v == "failed" for k, v in result.tests.items() if "test_calc" in k), result.tests


def test_a_canary_lies_in_one_of_two_ways_drawn_per_run():
    kinds = set()
    for _ in range(40):
        _, source, expected, _ = canary.make({"tests/test_calc.py": ""})
        assert sorted(expected.values()) == ["failed", "failed", "passed"]
        liar = next(line for line in source.splitlines() if "type(" in line)
        kinds.add("int subclass" if "(int,)" in liar else "own class")
        ast.parse(source)
    assert kinds == {"int subclass", "own class"}  # missing one: (1/2)**39


# ---------------------------------------------------------------------------------------------
# compare: known answers in process, on values only (no code under test runs here)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op, a, b, expected", [
    (honest.EQ, 1, 1, True), (honest.EQ, 1, 2, False), (honest.NE, "a", "b", True), (honest.LT, 1, 2.5, True),
    (honest.LE, 2, 2, True), (honest.GT, [1, 2], [1], True), (honest.GE, (1,), (2,), False),
    (honest.IN, 2, {1: 0, 2: 0}, True), (honest.NOT_IN, "x", "abc", True), (honest.EQ, {1: [2, {3}]}, {1: [2, {3}]}, True),
    (honest.EQ, float("nan"), float("nan"), False), (honest.EQ, None, 0, False), (honest.EQ, True, 1, True),
])  # fmt: skip
def test_plain_values_compare_as_the_interpreter_compares_them(op, a, b, expected):
    assert honest.compare(op, a, b, 3) is expected


def test_a_subclass_of_a_builtin_is_held_to_its_value():
    class Loud(str):  # honest: only its repr differs
        def __repr__(self):
            return "LOUD"

    class Flat(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    assert honest.compare(honest.EQ, Loud("a"), "a", 1) is True
    assert honest.compare(honest.EQ, Loud("a"), "b", 1) is False
    with pytest.raises(honest.ForgedComparison, match="Flat"):
        honest.compare(honest.EQ, Flat(0), 5, 1)
    with pytest.raises(honest.ForgedComparison):
        honest.compare(honest.EQ, [Flat(0)], [5], 1)  # inside a container too


class _Next:
    """An rng that always draws +1: the value next to the test's is then the test's value + 1."""

    def choice(self, seq):
        return seq[-1]

    def randrange(self, start, stop=None):
        return start if stop is None or start > 0 else 1


class Box:
    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return self.value == (other.value if isinstance(other, Box) else other)


def test_a_wrong_result_that_happens_to_be_the_value_asked_about_is_an_ordinary_failure(monkeypatch):
    """Asked whether it equals 5 (the test's 4, plus one), a Box holding 5 says yes, honestly: it is
    a lie only if the same object also equals 4."""
    monkeypatch.setattr(honest._State, "rng", _Next())
    assert honest._near(4) == 5
    assert honest.compare(honest.EQ, Box(5), 4, 1) is False
    assert honest.compare(honest.EQ, Box(4), 4, 1) is True

    class Both(Box):
        def __eq__(self, other):
            return other in (4, 5)

    with pytest.raises(honest.ForgedComparison, match="equal to 5, as well as"):
        honest.compare(honest.EQ, Both(0), 4, 1)


def test_a_library_subclass_of_a_builtin_keeps_its_own_equality():
    """Counter ignores zero counts; mock's ``call`` compares a call's two-part and three-part forms:
    both say yes where their tuple or dict values differ, so they are asked, not recomputed."""
    from collections import Counter
    from unittest.mock import Mock, call

    recorder = Mock()
    recorder(1, 2)
    assert honest.compare(honest.EQ, recorder.call_args, call(1, 2), 1) is True
    assert honest.compare(honest.EQ, recorder.call_args_list, [call(1, 2)], 1) is True
    assert honest.compare(honest.EQ, Counter(a=1, b=0), Counter(a=1), 3) is True
    assert honest.compare(honest.IN, 3, (i for i in range(5)), 3) is True  # an iterator is not used up


def test_what_the_test_wrote_itself_is_not_asked():
    class Wildcard:
        def __eq__(self, other):
            return True

    assert honest.compare(honest.EQ, {"id": 7}, {"id": Wildcard()}, 1) is True  # the right side is the test's
    with pytest.raises(honest.ForgedComparison):
        honest.compare(honest.EQ, {"id": 7}, {"id": Wildcard()}, 2)


def test_the_survey_tells_the_tests_own_expectations_from_values_of_running_code():
    tree = ast.parse(textwrap.dedent("""
        import pytest
        from unittest.mock import ANY
        from calc import add, CONSTANT

        def test_x(fixture):
            value = add(1, 2)
            assert add(1, 2) == 3
            assert value == {"id": ANY, "n": pytest.approx(0.5)}
            assert CONSTANT == fixture
            assert int("3") == -float("1e3")
            assert 0 < add(1, 2) < 10
            expected = {"id": ANY}
            assert value == expected
        """))
    trusted = lambda name: name in ("pytest", "unittest")  # noqa: E731
    surveyed = honest.survey(tree, trusted)
    assert list(surveyed.values()) == [[1], [1], [3], [0], [2, 1], [1]]
    rebound = ast.parse("from pytest import approx as add\nadd = 1\nassert add == 1\n")
    assert list(honest.survey(rebound, trusted).values()) == [[1]]  # a variable now, not pytest's name


HELPER_TESTS = {
    "tests/helpers.py": "def check_sum(value, expected):\n    assert value == expected\n",
    "tests/test_calc.py": "from calc import add\nfrom helpers import check_sum\n\n\ndef test_add():\n"
                          "    check_sum(add(2, 2), 4)\n\n\ndef test_more():\n    check_sum(add(1, 2), 3)\n",
}


def test_a_comparison_in_a_trusted_helper_module_of_the_tests_is_checked_too(executor):
    """pytest rewrites test modules and conftests only; a helper they import (``tests/helpers.py``)
    compared as plain Python, so a liar passed there. Trusted helpers are rewritten like the tests."""
    liar = LIARS["int-subclass-reads-its-operand"]
    result = _run(executor, {"calc.py": liar}, HELPER_TESTS)
    assert result.status == "failed" and result.reason.startswith("forged comparison in tests/test_calc.py::test_")
    assert "ForgedComparison" in result.stdout
    honest_add = _run(executor, {"calc.py": "def add(a, b):\n    return a + b\n"}, HELPER_TESTS)
    assert honest_add.status == "passed", honest_add.reason
    wrong_add = _run(executor, {"calc.py": "def add(a, b):\n    return a - b\n"}, HELPER_TESTS)
    assert wrong_add.status == "failed" and wrong_add.reason.startswith("2 of 2 tests failed"), wrong_add.reason


def test_the_helpers_are_trusted_files_beside_trusted_test_modules():
    trusted = frozenset({"tests/test_a.py", "tests/helpers.py", "tests/util/strings.py", "tests/conftest.py",
                         "tests/data.json", "calc.py", "test_root.py", "src/pkg/tests/check_test.py",
                         "src/pkg/tests/fixtures.py", "src/pkg/core.py"})
    assert runners.test_helpers(trusted) == ["src/pkg/tests/fixtures.py", "tests/helpers.py", "tests/util/strings.py"]
    assert runners.test_helpers(frozenset({"test_root.py", "helpers.py"})) == []  # tests at the root: none
