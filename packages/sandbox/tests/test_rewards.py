"""Reward components and the two seed presets on hand-built before/after results (known answers)."""

from __future__ import annotations

import pytest
from codemoe.sandbox.api import ExecutionResult
from codemoe.sandbox.rewards import (
    RewardInput,
    RewardSpecError,
    ToolCall,
    build_reward,
    reward_input_from_results,
)
from codemoe.sandbox.rewards.presets import load_preset

P, F = "passed", "failed"

SOURCE_BEFORE = "def square(x):\n    raise NotImplementedError\n"
TESTS = "from m import square\n\n\ndef test_three():\n    assert square(3) == 9\n"


def _recipe(name: str):
    return build_reward(load_preset(name))


@pytest.fixture
def broken_progress() -> RewardInput:
    """Two tests fixed, one broken, one file that does not compile, 12 steps."""
    return RewardInput(
        visible_before={"t::a": P, "t::b": F, "t::c": F, "t::d": P},
        visible_after={"t::a": P, "t::b": P, "t::c": P, "t::d": F},
        files_before={"src/m.py": "x = 1\n", "src/n.py": "y = 2\n", "tests/test_m.py": TESTS},
        files_after={"src/m.py": "x = 2\n", "src/n.py": "def broken(:\n", "tests/test_m.py": TESTS},
        steps=12,
    )


@pytest.fixture
def solved() -> RewardInput:
    """Every test passes after the change, two of them newly, in 7 steps."""
    return RewardInput(
        visible_before={"t::a": P, "t::b": F, "t::c": F},
        visible_after={"t::a": P, "t::b": P, "t::c": P},
        files_before={"m.py": SOURCE_BEFORE, "test_m.py": TESTS},
        files_after={"m.py": "def square(x):\n    return x * x\n", "test_m.py": TESTS},
        steps=7,
    )


def hacked() -> RewardInput:
    """A wrong solution whose test was rewritten to ``assert True``: every visible test passes."""
    return RewardInput(
        visible_before={"test_m.py::test_three": F, "test_m.py::test_zero": F, "test_m.py::test_one": F},
        visible_after={"test_m.py::test_three": P, "test_m.py::test_zero": P, "test_m.py::test_one": P},
        files_before={"m.py": SOURCE_BEFORE, "test_m.py": TESTS},
        files_after={"m.py": "def square(x):\n    return x\n", "test_m.py": "def test_three():\n    assert True\n"},
        steps=5,
    )


def honest_partial() -> RewardInput:
    """An honest solution that passes one visible test of three."""
    return RewardInput(
        visible_before={"test_m.py::test_three": F, "test_m.py::test_zero": F, "test_m.py::test_one": F},
        visible_after={"test_m.py::test_three": F, "test_m.py::test_zero": P, "test_m.py::test_one": F},
        files_before={"m.py": SOURCE_BEFORE, "test_m.py": TESTS},
        files_after={"m.py": "def square(x):\n    return 0\n", "test_m.py": TESTS},
        steps=5,
    )


# -- seed 1: -1 per compile error, -2 per regression, +1.5 per newly passing, +10 all pass, -0.01/step


def test_seed1_on_partial_progress_with_a_compile_error(broken_progress):
    result = _recipe("seed1-stepwise")(broken_progress)
    assert result.components == {
        "compile_errors": 1.0,
        "regressions": 1.0,
        "newly_passing": 2.0,
        "all_pass": 0.0,
        "step_cost": 12.0,
        "hack_penalty": 0.0,
    }
    assert result.total == pytest.approx(-1.0 - 2.0 + 3.0 + 0.0 - 0.12)  # -0.12
    assert "src/n.py:1" in result.explanations["compile_errors"]
    assert "t::d" in result.explanations["regressions"]


def test_seed1_on_a_solved_task(solved):
    result = _recipe("seed1-stepwise")(solved)
    assert result.total == pytest.approx(1.5 * 2 + 10 - 0.07)  # 12.93
    assert result.weights == {
        "compile_errors": -1.0,
        "regressions": -2.0,
        "newly_passing": 1.5,
        "all_pass": 10.0,
        "step_cost": -0.01,
        "hack_penalty": 0.0,
    }


# -- seed 2: 0.2 compile_success + 0.3 test_pass_rate + 0.5 task_complete - 0.1 hack_penalty


def test_seed2_on_partial_progress_with_a_compile_error(broken_progress):
    result = _recipe("seed2-weighted")(broken_progress)
    assert result.components == {
        "compile_success": 0.0,
        "test_pass_rate": 0.75,
        "task_complete": 0.0,
        "hack_penalty": 0.0,
    }
    assert result.total == pytest.approx(0.3 * 0.75)  # 0.225
    assert result.metrics["hacked"] == 0.0


def test_seed2_on_a_solved_task(solved):
    result = _recipe("seed2-weighted")(solved)
    assert result.total == pytest.approx(0.2 + 0.3 + 0.5)
    assert result.total == pytest.approx(sum(result.weights[n] * v for n, v in result.components.items()))


def test_seed2_hacked_solution_passing_every_visible_test_scores_below_an_honest_partial_one():
    recipe = _recipe("seed2-weighted")
    cheat, honest = recipe(hacked()), recipe(honest_partial())
    # hack_penalty = 2: the test file was modified, and its assert made always true
    assert cheat.components == {
        "compile_success": 1.0,
        "test_pass_rate": 0.0,
        "task_complete": 0.0,
        "hack_penalty": 2.0,
    }
    assert cheat.total == pytest.approx(0.2 - 0.1 * 2)  # 0.0
    assert "voided, hack_penalty fired (was 1" in cheat.explanations["test_pass_rate"]
    assert cheat.metrics["hacked"] == 1.0
    assert cheat.metrics["hack_penalty/test_tampering"] == 1.0
    assert cheat.metrics["hack_penalty/weakened_asserts"] == 1.0
    assert honest.total == pytest.approx(0.2 + 0.3 / 3)  # 0.3
    assert cheat.total < honest.total


def test_without_voiding_the_literal_formula_would_pay_the_hacker():
    """Why seed2-weighted voids test terms in a hacked episode: 0.8 for the hack against 0.3."""
    spec = load_preset("seed2-weighted")
    spec.pop("hack_signal"), spec.pop("void_when_hacked")
    result = build_reward(spec)(hacked())
    assert result.total == pytest.approx(0.2 + 0.3 + 0.5 - 0.1 * 2)
    assert "hacked" not in result.metrics


def test_seed2_quality_adds_quality_terms_to_seed2(solved):
    result = _recipe("seed2-quality")(solved)
    assert set(result.components) == {
        "compile_success",
        "test_pass_rate",
        "task_complete",
        "hack_penalty",
        "complexity",
        "lint_warnings",
        "static_rules",
    }
    assert result.total == pytest.approx(1.0)  # square(x) = x * x is clean


# -- single components


def test_newly_passing_ignores_tests_the_change_adds():
    inp = RewardInput(visible_before={"a": F}, visible_after={"a": P, "new": P})
    assert build_reward("newly_passing")(inp).value == 1.0


def test_a_deleted_test_is_a_regression_and_not_passing():
    inp = RewardInput(visible_before={"a": P, "b": F}, visible_after={"b": P})
    assert build_reward("regressions")(inp).value == 1.0
    assert build_reward("test_pass_rate")(inp).value == 0.5
    assert build_reward("all_pass")(inp).value == 0.0


def test_visible_and_hidden_selection():
    inp = RewardInput(visible_after={"v1": P, "v2": P}, hidden_after={"h1": P, "h2": F, "h3": F, "h4": F})
    assert build_reward("test_pass_rate")(inp).value == 1.0
    assert build_reward({"name": "test_pass_rate", "tests": "hidden"})(inp).value == 0.25
    assert build_reward("hidden_pass_rate")(inp).value == 0.25
    assert build_reward({"name": "test_pass_rate", "tests": "all"})(inp).value == pytest.approx(3 / 6)
    with pytest.raises(ValueError, match="test_pass_rate: option tests='secret'; expected visible, hidden or all"):
        build_reward({"name": "test_pass_rate", "tests": "secret"})


def test_visible_hidden_gap_is_reported_as_a_metric():
    inp = RewardInput(visible_after={"v1": P, "v2": P}, hidden_after={"h1": P, "h2": F, "h3": F, "h4": F})
    result = _recipe("seed2-weighted")(inp)
    assert result.metrics["visible_hidden_gap"] == pytest.approx(0.75)
    assert result.as_metrics()["reward/visible_hidden_gap"] == pytest.approx(0.75)
    assert result.as_metrics()["reward/total"] == result.total
    assert "visible_hidden_gap" not in _recipe("seed2-weighted")(RewardInput(visible_after={"v": P})).metrics


def test_no_tests_is_no_pass():
    empty = RewardInput()
    assert build_reward("test_pass_rate")(empty).value == 0.0
    assert build_reward("all_pass")(empty).value == 0.0
    assert build_reward("task_complete")(empty).explanation == "not complete: no visible tests ran"


def test_compile_errors_count_files_and_build_errors_not_other_languages():
    inp = RewardInput(
        files_after={"a.py": "x = (\n", "b.py": "def f(:\n", "c.py": "ok = 1\n", "notes.md": "def f(:"},
        build_errors=["make: *** [all] Error 2"],
    )
    value = build_reward("compile_errors")(inp)
    assert value.value == 3.0
    assert value.evidence[0] == "build: make: *** [all] Error 2"
    assert build_reward("compile_success")(inp).value == 0.0


def test_steps_and_tool_call_format_errors():
    calls = [ToolCall("read_file"), ToolCall("edit", ok=False, error="bad JSON"), ToolCall("<unparsed>", ok=False)]
    inp = RewardInput(tool_calls=calls, steps=3)
    value = build_reward("format_errors")(inp)
    assert value.value == 2.0
    assert value.explanation == "2/3 tool call(s) malformed: edit: bad JSON, <unparsed>"
    assert build_reward("step_cost")(inp).value == 3.0
    assert build_reward("tool_errors")(inp).value == 0.0  # malformed calls are format errors, not tool errors


def test_tool_errors_count_well_formed_calls_that_failed():
    calls = [ToolCall("read_file", failure="not_found"), ToolCall("read_file"), ToolCall("edit", failure="no_match"),
             ToolCall("edit", ok=False, error="bad JSON"), ToolCall("shell", failure="not_allowed")]
    value = build_reward("tool_errors")(RewardInput(tool_calls=calls, steps=5))
    assert value.value == 3.0
    assert value.explanation == "3/5 tool call(s) failed: read_file: not_found, edit: no_match and 1 more"
    assert build_reward({"name": "weighted_sum", "components": {"tool_errors": {}}})(
        RewardInput(tool_calls=calls)).total == pytest.approx(-0.3)


# -- building recipes, and reward inputs from executor results


def test_recipe_errors_name_the_problem():
    with pytest.raises(
        RewardSpecError, match="'components.test_pas_rate': unknown reward 'test_pas_rate'.*test_pass_rate"
    ):
        build_reward({"name": "weighted_sum", "components": {"test_pas_rate": {}}})
    with pytest.raises(RewardSpecError, match="'components.all_pass': reward 'all_pass' has no option"):
        build_reward({"name": "weighted_sum", "components": {"all_pass": {"wieght": 2}}})
    with pytest.raises(RewardSpecError, match="expected a mapping of options"):
        build_reward({"name": "weighted_sum", "components": {"all_pass": 2}})
    with pytest.raises(RewardSpecError, match="not one of its components"):
        build_reward({"name": "weighted_sum", "components": {"all_pass": {}}, "hack_signal": "hack_penalty"})


def test_recipe_labels_pick_components_and_null_drops_one(solved):
    recipe = build_reward(
        {
            "name": "weighted_sum",
            "components": {
                "visible": {"name": "test_pass_rate", "weight": 1.0},
                "hidden": {"name": "test_pass_rate", "tests": "hidden", "weight": 0.0},
                "all_pass": None,
            },
        }
    )
    result = recipe(solved)
    assert result.components == {"visible": 1.0, "hidden": 0.0}
    assert result.total == 1.0


def test_reward_input_from_executor_results():
    before = ExecutionResult(status="failed", tests={"t.py::a": "passed", "t.py::b": "failed"})
    after = ExecutionResult(status="failed", tests={}, reason="no valid test report (exit code 0): the session did not finish",
                            integrity="no-report")
    inp = reward_input_from_results(before=before, after=after, files_after={"m.py": "x = 1\n"}, steps=4)
    assert inp.visible_before == {"t.py::a": P, "t.py::b": F}
    assert inp.visible_after == {}
    assert inp.hidden_after is None
    assert list(inp.integrity) == ["no-report: no valid test report (exit code 0): the session did not finish"]
    assert build_reward("early_exit")(inp).value == 1.0
    assert build_reward("runner_tampering")(inp).value == 0.0
    assert build_reward("regressions")(inp).value == 1.0


def test_an_ordinary_failure_whose_reason_holds_the_words_is_no_integrity_finding():
    """A failing test named ``test_nonce_...`` or a program's message with "forged" in it is a failure
    like any other: only the result's ``integrity`` makes a finding, so no detector voids the reward."""
    before = ExecutionResult(status="failed", tests={"tests/test_nonce.py::test_forged_token": "failed"})
    after = ExecutionResult(status="failed", tests={"tests/test_nonce.py::test_forged_token": "failed"},
                            reason="1 of 1 tests failed or errored: tests/test_nonce.py::test_forged_token")
    inp = reward_input_from_results(before=before, after=after, files_after={"m.py": "x = 1\n"}, steps=4)
    assert list(inp.integrity) == []
    assert build_reward("early_exit")(inp).value == 0.0
    assert build_reward("runner_tampering")(inp).value == 0.0


def test_a_run_without_per_test_outcomes_as_one_test():
    ok = ExecutionResult(status="passed", id="HumanEval/0")
    broken = ExecutionResult(status="error", reason="compile: SyntaxError: invalid syntax (line 3)")
    assert reward_input_from_results(after=ok, single_test="checks").visible_after == {"checks": P}
    inp = reward_input_from_results(after=broken, single_test="checks")
    assert inp.visible_after == {"checks": F}
    assert build_reward("compile_errors")(inp).value == 1.0


def test_compile_check_is_silent_about_syntax_warnings(recwarn):
    from codemoe.sandbox.rewards.types import RewardInput
    from codemoe.sandbox.rewards.verifiable import compile_errors

    odd = "def f():\n    return 1(2)\n"  # compiles, with a SyntaxWarning ('int' object is not callable)
    inp = RewardInput(files_before={"m.py": ""}, files_after={"m.py": odd})
    assert compile_errors(inp) == []
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
