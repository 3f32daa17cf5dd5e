"""Agent metrics: known answers on hand-built episode logs (the sandbox's own Episode and StepRecord)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from codemoe.evals.agent_metrics import (
    agent_summary,
    compare_agent,
    episode_facts,
    format_change,
    format_estimate,
    headline,
    ratio_estimate,
    self_correction,
)
from codemoe.evals.grading import GradedSample
from codemoe.evals.passk import TaskOutcome
from codemoe.evals.report import build_report
from codemoe.evals.summary import summarize
from codemoe.sandbox.agent.episode import Episode, StepRecord


def run(status: str) -> StepRecord:
    return StepRecord(tool="run_tests", args={}, data={"status": status})


def edit(new: str, ok: bool = True) -> StepRecord:
    return StepRecord(
        tool="edit",
        args={"path": "src/m.py", "old": "x - 1", "new": new},
        ok=ok,
        error_kind="" if ok else "no_match",
        data={"path": "src/m.py"} if ok else {},
    )


def malformed() -> StepRecord:
    return StepRecord(tool="", args={}, ok=False, error_kind="malformed", format_error=True)


def submit() -> StepRecord:
    return StepRecord(tool="submit", args={"summary": "done"}, data={"summary": "done"})


def episode(log: list[StepRecord], *, resolved: bool, stop_reason: str = "submitted") -> Episode:
    ep = Episode(task_id="t", task_type="test-driven-bug-fix", step_budget=20, files_before={}, messages=[], tools=[])
    for n, record in enumerate(log, 1):
        record.step = n
    ep.log, ep.steps, ep.done, ep.resolved, ep.stop_reason = list(log), len(log), True, resolved, stop_reason
    return ep


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ([run("failed"), edit("x"), run("passed"), submit()], True),  # run, fix, run green
        ([edit("x + 1"), run("failed"), edit("x"), run("passed")], True),  # own wrong fix, then another
        ([edit("x"), run("failed"), edit("x"), run("passed")], False),  # the same edit again
        ([run("failed"), edit("x"), run("failed"), submit()], False),  # never green after it
        ([run("failed"), edit("x"), submit(), run("passed")], True),  # a green run after the edit, wherever
        ([run("failed"), run("failed"), submit()], None),  # no edit after the failure: no occasion
        ([edit("x"), run("passed"), submit()], None),  # no failing run
        ([run("failed"), edit("x", ok=False), run("passed")], None),  # a refused edit changed nothing
        (
            [StepRecord("run_tests", {"targets": ["/etc"]}, ok=False, error_kind="denied"), edit("x"), run("passed")],
            None,
        ),  # a refused test run is no failing run
        (
            [
                run("error"),
                StepRecord("write_file", {"path": "src/m.py", "content": "x"}, data={"path": "src/m.py"}),
                run("passed"),
            ],
            True,
        ),  # write_file is an edit; a test run that errors is a failing one
    ],
)
def test_self_correction_on_hand_built_logs(log: list[StepRecord], expected: bool | None) -> None:
    assert self_correction(log) is expected


def test_episode_facts_read_the_sandbox_episode() -> None:
    ep = episode([malformed(), run("failed"), malformed(), edit("x"), run("passed"), submit()], resolved=True)
    assert ep.format_errors == 2
    assert episode_facts(ep) == {
        "resolved": True,
        "turns": 6,
        "format_errors": 2,
        "stop_reason": "submitted",
        "self_correction": True,
    }
    unfinished = episode([run("failed")], resolved=False)
    unfinished.done = False  # an episode that never ended is not resolved, whatever its flag says
    unfinished.resolved = True
    assert episode_facts(unfinished)["resolved"] is False
    assert episode_facts(object()) is None  # no tool-call log: no facts


def sample(task: str, family: str, ep: Episode) -> GradedSample:
    facts = episode_facts(ep)
    return GradedSample(task, family, 0, "", "passed" if facts["resolved"] else "failed", "", "", 0.0, episode=facts)


def two_tasks() -> list[GradedSample]:
    """Task a (family x): resolved in 4 turns with a self-correction; unresolved, 3 format errors,
    a fix never green, stopped by anti-spin. Task b (family y): resolved in 6 turns with 1 format error, no occasion to
    correct; unresolved, out of steps."""
    return [
        sample("a", "x", episode([run("failed"), edit("x"), run("passed"), submit()], resolved=True)),
        sample(
            "a",
            "x",
            episode(
                [malformed(), malformed(), malformed(), run("failed"), edit("x"), run("failed")],
                resolved=False,
                stop_reason="anti_spin",
            ),
        ),
        sample(
            "b",
            "y",
            episode([malformed(), edit("x"), run("passed"), run("passed"), run("passed"), submit()], resolved=True),
        ),
        sample("b", "y", episode([run("passed")], resolved=False, stop_reason="step_budget")),
    ]


def test_every_metric_on_two_hand_built_tasks() -> None:
    summary = agent_summary(two_tasks(), resamples=2000, seed=0)
    assert (summary["episodes"], summary["tasks"]) == (4, 2)
    m = summary["metrics"]
    # (value, summed denominator): the ratio of sums over tasks
    assert (m["resolve_rate"]["value"], m["resolve_rate"]["n"]) == (0.5, 4)
    assert (m["format_errors"]["value"], m["format_errors"]["n"]) == (1.0, 4)  # 4 errors / 4 episodes
    assert m["format_error_episodes"]["value"] == 0.5
    assert (m["turns_to_resolve"]["value"], m["turns_to_resolve"]["n"]) == (5.0, 2)  # (4 + 6) / 2
    assert (m["self_correction_rate"]["value"], m["self_correction_rate"]["n"]) == (0.5, 2)  # a: 1 of 2
    assert m["anti_spin_rate"]["value"] == 0.25
    assert summary["stop_reasons"] == {"anti_spin": 1, "step_budget": 1, "submitted": 2}
    # intervals: a resample is (a, a), (a, b) or (b, b); each of the two pure ones has probability
    # 1/4, so the 2.5th and 97.5th percentiles of 2000 resamples are the pure values
    assert (m["resolve_rate"]["low"], m["resolve_rate"]["high"]) == (0.5, 0.5)  # both tasks 1 of 2
    assert (m["format_errors"]["low"], m["format_errors"]["high"]) == (0.5, 1.5)  # b: 1/2, a: 3/2
    assert (m["turns_to_resolve"]["low"], m["turns_to_resolve"]["high"]) == (4.0, 6.0)
    # task b has no eligible episode: resamples of b alone are undefined and left out, the rest are 1/2
    assert (m["self_correction_rate"]["low"], m["self_correction_rate"]["high"]) == (0.5, 0.5)
    fam = summary["families"]
    assert fam["x"]["tasks"] == 1 and fam["x"]["turns_to_resolve"]["value"] == 4.0
    assert fam["y"]["self_correction_rate"] == {"value": None, "low": None, "high": None, "confidence": 0.95, "n": 0}
    assert summary["per_task"]["a"] == {
        "family": "x",
        "episodes": 2,
        "resolved": 1,
        "format_errors": 3,
        "format_error_episodes": 1,
        "resolved_turns": 4,
        "self_correction_eligible": 2,
        "self_corrected": 1,
        "anti_spin": 1,
    }


def test_samples_without_episode_facts_give_no_agent_summary() -> None:
    assert agent_summary([GradedSample("t", "f", 0, "    return 1\n", "passed", "", "", 0.0)]) is None


def test_resolve_rate_and_its_interval_are_pass_at_1_of_the_summary() -> None:
    rng = random.Random(3)
    samples, outcomes = [], []
    for t in range(30):
        resolved = [rng.random() < 0.4 for _ in range(4)]
        outcomes.append(TaskOutcome(f"t{t}", "f", 4, sum(resolved)))
        samples += [sample(f"t{t}", "f", episode([submit()], resolved=r)) for r in resolved]
    mine = agent_summary(samples, resamples=500, seed=7)["metrics"]["resolve_rate"]
    theirs = summarize(outcomes, [1], resamples=500, seed=7)["overall"]["pass@1"]
    # the same task draws; a ratio of sums and a mean of per-task means differ by rounding only
    for key in ("value", "low", "high"):
        assert mine[key] == pytest.approx(theirs[key], abs=1e-12)


def test_ratio_estimate_is_a_ratio_of_sums_over_tasks() -> None:
    est = ratio_estimate([2, 1], [4, 1])
    assert est["value"] == pytest.approx(0.6) and est["n"] == 5  # 3 / 5, not the mean of 0.5 and 1.0
    assert (est["low"], est["high"]) == (0.5, 1.0)  # the pure resamples (a, a) and (b, b)
    constant = ratio_estimate([1, 2, 3], [2, 4, 6])
    assert (constant["value"], constant["low"], constant["high"]) == (0.5, 0.5, 0.5)
    assert ratio_estimate([0, 0], [0, 0])["value"] is None
    with pytest.raises(ValueError, match="one numerator and one denominator per task"):
        ratio_estimate([1], [1, 2])


def _uniform(format_errors: int, resolved: bool, tasks: int = 10) -> dict:
    def log() -> list[StepRecord]:
        return [malformed() for _ in range(format_errors)] + [submit()]

    return agent_summary([sample(f"t{i}", "f", episode(log(), resolved=resolved)) for i in range(tasks)])


def test_compare_before_and_after_with_intervals() -> None:
    before, after = _uniform(format_errors=4, resolved=False), _uniform(format_errors=1, resolved=True)
    cmp = compare_agent(before, after)
    assert cmp["paired"] and cmp["tasks"] == 10
    fe = cmp["metrics"]["format_errors"]
    assert (fe["before"]["value"], fe["after"]["value"]) == (4.0, 1.0)
    # every task moves by the same amount: the paired interval has no width
    assert (fe["absolute"]["value"], fe["absolute"]["low"], fe["absolute"]["high"]) == (-3.0, -3.0, -3.0)
    assert fe["relative"]["value"] == pytest.approx(-0.75)
    rr = cmp["metrics"]["resolve_rate"]
    assert rr["absolute"]["value"] == 1.0 and rr["relative"]["value"] is None  # from 0: no relative change
    assert cmp["metrics"]["turns_to_resolve"]["before"]["value"] is None  # nothing resolved before


def test_compare_is_paired_only_on_the_same_tasks() -> None:
    before = _uniform(format_errors=2, resolved=False, tasks=3)
    after = _uniform(format_errors=0, resolved=False, tasks=5)
    cmp = compare_agent(before, after)
    assert not cmp["paired"] and cmp["tasks"] == 3
    assert cmp["metrics"]["format_errors"]["absolute"]["value"] == -2.0


def test_graded_samples_keep_their_facts_through_json() -> None:
    (first, *_) = two_tasks()
    assert GradedSample.from_dict(first.as_dict()) == first
    assert GradedSample.from_dict(first.as_dict()).episode["self_correction"] is True


def test_shares_counts_and_undefined_metrics_read_as_reports_show_them() -> None:
    est = {"value": 0.125, "low": 0.05, "high": 0.2, "confidence": 0.95, "n": 40}
    assert format_estimate("resolve_rate", est) == "12.5% [5.0, 20.0] (40 episodes)"
    assert (
        format_estimate("format_errors", {**est, "value": 1.2, "low": 0.9, "high": 1.5})
        == "1.20 [0.90, 1.50] (40 episodes)"
    )
    undefined = {"value": None, "low": None, "high": None, "confidence": 0.95, "n": 0}
    assert format_estimate("turns_to_resolve", undefined) == "- (0 resolved)"
    assert format_estimate("self_correction_rate", {**est, "n": 3}, count=False) == "12.5% [5.0, 20.0]"
    assert format_change("resolve_rate", {"value": 0.05, "low": 0.012, "high": 0.088}) == "+5.0 points [+1.2, +8.8]"
    assert format_change("format_errors", {"value": -0.5, "low": -0.8, "high": -0.2}) == "-0.50 [-0.80, -0.20]"
    summary = agent_summary(two_tasks())
    flat = headline(summary)
    assert flat["turns_to_resolve"] == 5.0 and flat["turns_to_resolve_ci"] == [4.0, 6.0]
    assert flat["stop_reasons"] == summary["stop_reasons"]


def _eval_result(folder: Path, stage: str, format_errors: int, resolved: bool) -> dict:
    agent = _uniform(format_errors=format_errors, resolved=resolved)
    outcomes = [TaskOutcome(t, row["family"], row["episodes"], row["resolved"]) for t, row in agent["per_task"].items()]
    summary = {**summarize(outcomes, [1]), "agent": agent}
    path = folder / stage / "eval.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(summary))
    return {"kind": "eval", "suite": "synthetic-repos", "split": "heldout", "summary": str(path), "step": 0}


def test_the_report_shows_agent_metrics_and_their_change(tmp_path: Path) -> None:
    results = {
        "eval_sft": _eval_result(tmp_path, "eval_sft", 4, False),
        "eval_rl": _eval_result(tmp_path, "eval_rl", 1, True),
    }
    report = build_report(tmp_path, results).read_text()
    assert "## Agent metrics (held-out episodes, 95% CI)" in report
    assert "| format errors per episode | 4.00 [4.00, 4.00] (10 episodes) | 1.00 [1.00, 1.00] (10 episodes) |" in report
    assert "| stop reasons (episodes) | submitted 10 | submitted 10 |" in report
    assert "## Agent metrics before and after: eval_sft -> eval_rl" in report
    assert "10 tasks, paired bootstrap over tasks, 95% CI." in report
    assert (
        "| format errors per episode | 4.00 [4.00, 4.00] (10 episodes) | 1.00 [1.00, 1.00] (10 episodes) | "
        "-3.00 [-3.00, -3.00] | -75.0% [-75.0, -75.0] |"
    ) in report
    assert "| turns to resolve | - (0 resolved) | 2.00 [2.00, 2.00] (10 resolved) | - | - |" in report
