"""Human review: the sample, the static page, verdict import and grader-human agreement."""

from __future__ import annotations

import json

import pytest
from codemoe.evals.grading import GradedSample
from codemoe.evals.review import agreement, load_verdicts, sample_for_review, write_review
from codemoe.evals.synthetic import SyntheticSuite, SyntheticSuiteConfig


def _graded(passes: int, fails: int) -> list[GradedSample]:
    out = []
    for i in range(passes + fails):
        status = "passed" if i < passes else "failed"
        out.append(GradedSample(f"t{i // 4}", "f", i % 4, f"    return {i}\n", status, "", "", 0.01))
    return out


def test_sample_is_seven_percent_by_default_and_covers_both_grades() -> None:
    graded = _graded(60, 140)
    chosen = sample_for_review(graded)
    assert len(chosen) == 14  # 7% of 60 passes (4) + 7% of 140 fails (10)
    assert sum(s.passed for s in chosen) == 4
    assert chosen == sample_for_review(graded)  # same seed, same sample
    assert len(sample_for_review(graded, fraction=0.10)) == 20
    with pytest.raises(ValueError, match="between 0.05 and 0.1"):
        sample_for_review(graded, fraction=0.5)


def test_page_shows_prompt_completion_output_grade_and_a_verdict_field(tmp_path) -> None:
    task = SyntheticSuite(SyntheticSuiteConfig(heldout_tasks=1)).tasks("heldout")[0]
    sample = GradedSample(task.id, task.family, 0, "    return '<b>'\n", "failed", "AssertionError", "Traceback", 0.1)
    page = write_review(tmp_path, [sample], {task.id: task}, total=14).read_text()
    assert task.entry_point in page  # the prompt
    assert "&lt;b&gt;" in page and "<b>'" not in page  # the completion, escaped
    assert "AssertionError" in page and "Traceback" in page
    assert "grader: fail (failed)" in page
    assert f'name="{task.id}#0" value="pass"' in page
    assert json.loads((tmp_path / "review.json").read_text())["items"][0]["task_id"] == task.id


def test_agreement_known_answer(tmp_path) -> None:
    items = _graded(5, 5)  # keys t0#0..t0#3 t1#0..t1#3 t2#0 t2#1; the first five pass
    keys = [f"{s.task_id}#{s.index}" for s in items]
    human = ["pass", "pass", "pass", "pass", "fail", "fail", "fail", "fail", "fail", "pass"]
    path = tmp_path / "verdicts.json"
    path.write_text(json.dumps({"verdicts": {k: {"verdict": v, "note": ""} for k, v in zip(keys, human)}}))
    result = agreement(items, load_verdicts(path))
    assert result["reviewed"] == 10
    assert result["agreement"] == pytest.approx(0.8)
    # p_o = 0.8; grader passes 0.5, human passes 0.5 -> p_e = 0.5; kappa = 0.3 / 0.5
    assert result["kappa"] == pytest.approx(0.6)
    assert result["confusion"]["grader_pass_human_fail"] == 1
    assert result["confusion"]["grader_fail_human_pass"] == 1
    assert sorted(result["disagreements"]) == sorted([keys[4], keys[9]])


def test_bad_verdicts_are_refused(tmp_path) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"verdicts": {"t0#0": "maybe"}}))
    with pytest.raises(ValueError, match="use one of pass, fail"):
        load_verdicts(path)
    with pytest.raises(ValueError, match="not in the review"):
        agreement(_graded(1, 0), {"zzz#9": "pass"})


def test_review_import_command_reports_agreement(tmp_path, capsys) -> None:
    from codemoe.core.cli import main

    items = _graded(2, 2)
    write_review(tmp_path, items, {})
    verdicts = tmp_path / "verdicts.json"
    keys = [f"{s.task_id}#{s.index}" for s in items]
    verdicts.write_text(json.dumps({"verdicts": dict(zip(keys, ["pass", "fail", "fail", "fail"]))}))
    assert main(["eval", "review-import", str(tmp_path), str(verdicts)]) == 0
    out = capsys.readouterr().out
    assert "reviewed 4 of 4 sampled; agreement 75.0%" in out and f"disagreement: {keys[1]}" in out
    saved = json.loads((tmp_path / "review_agreement.json").read_text())
    assert saved["kappa"] == pytest.approx(0.5)  # p_o 0.75, p_e 0.5
