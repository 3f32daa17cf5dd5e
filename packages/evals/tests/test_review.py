"""Human review: the sample, the blind page, verdict import and grader-human agreement."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from codemoe.evals.grading import GradedSample
from codemoe.evals.review import Verdict, agreement, load_verdicts, sample_for_review, write_review
from codemoe.evals.synthetic import SyntheticSuite, SyntheticSuiteConfig


def _graded(passes: int, fails: int) -> list[GradedSample]:
    out = []
    for i in range(passes + fails):
        status = "passed" if i < passes else "failed"
        out.append(GradedSample(f"t{i // 4}", "f", i % 4, f"    return {i}\n", status, "", "", 0.01))
    return out


def _keys(items: list[GradedSample]) -> list[str]:
    return [f"{s.task_id}#{s.index}" for s in items]


class _Page(HTMLParser):
    """What a browser renders of a page: its text outside script and style, the scripts apart,
    and the elements with the ``hidden`` attribute (with their text)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.hidden: list[str] = []
        self._stack: list[tuple[str, bool]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag not in ("input", "meta", "br"):
            self._stack.append((tag, "hidden" in dict(attrs)))
            if "hidden" in dict(attrs):
                self.hidden.append("")

    def handle_endtag(self, tag):
        if self._stack and self._stack[-1][0] == tag:
            self._stack.pop()

    def handle_data(self, data):
        tags = [t for t, _ in self._stack]
        if "script" in tags:
            self.scripts.append(data)
        elif "style" in tags:
            return
        elif any(hidden for _, hidden in self._stack):
            self.hidden[-1] += data
        else:
            self.text.append(data)


def test_sample_is_seven_percent_by_default_and_covers_both_grades() -> None:
    graded = _graded(60, 140)
    chosen = sample_for_review(graded)
    assert len(chosen) == 14  # 7% of 60 passes (4) + 7% of 140 fails (10)
    assert sum(s.passed for s in chosen) == 4
    assert chosen == sample_for_review(graded)  # same seed, same sample
    assert len(sample_for_review(graded, fraction=0.10)) == 20
    with pytest.raises(ValueError, match="between 0.05 and 0.1"):
        sample_for_review(graded, fraction=0.5)


def test_page_shows_the_work_and_hides_the_grader_until_a_verdict(tmp_path) -> None:
    task = SyntheticSuite(SyntheticSuiteConfig(heldout_tasks=1)).tasks("heldout")[0]
    sample = GradedSample(task.id, task.family, 0, "    return '<b>'\n", "failed", "AssertionError: 3 != 4",
                          "Traceback (most recent call last)", 0.1)
    page = write_review(tmp_path, [sample], {task.id: task}, total=14).read_text()
    rendered = _Page(page)
    text = "".join(rendered.text)
    assert task.entry_point in text  # the prompt
    assert "return '<b>'" in text and "&lt;b&gt;" in page  # the completion, escaped
    assert f'name="{task.id}#0" value="pass"' in page and f'name="{task.id}#0" value="fail"' in page
    assert "0 of 1 reviewed" in text  # progress
    # nothing of the grader's is in the item's markup, visible or hidden: not the verdict, not its evidence
    (item,) = re.findall(r"<section class=\"item\".*?</section>", page, flags=re.S)
    for told in ("grader: fail", "failed", "AssertionError", "Traceback"):
        assert told not in item, told
    assert rendered.hidden == [""]  # the grader's box: hidden and empty until the reveal
    # the page carries it encoded for the reveal, and review.json keeps the grades for the import
    grades = re.search(r"const GRADES = '([A-Za-z0-9+/=]*)';", page).group(1)
    assert json.loads(base64.b64decode(grades))[f"{task.id}#0"] == {
        "grade": "fail", "status": "failed", "reason": "AssertionError: 3 != 4", "output": "Traceback (most recent call last)"}
    assert json.loads((tmp_path / "review.json").read_text())["items"][0]["task_id"] == task.id


_DRIVER = """
const out = {};
const s = review.create(review.decode(GRADES));
const [k1, k2, k3, k4] = Object.keys(s.grades).sort();
out.before = review.grade(s, k1);
out.graderPassBefore = Object.keys(s.grades).filter(k => review.matches(s, k, 'grader-pass'));
review.choose(s, k1, 'fail', 'wrong rounding');  // blind: nothing shown yet
out.after = review.grade(s, k1);
review.reveal(s, k2); review.choose(s, k2, 'pass');  // looked first
review.choose(s, k3, 'pass'); review.choose(s, k3, 'fail');  // changed after the reveal
out.progress = review.progress(s);
for (const f of ['todo', 'mine-pass', 'mine-fail', 'grader-pass', 'grader-fail', 'disagree'])
  out[f] = Object.keys(s.grades).sort().filter(k => review.matches(s, k, f));
out.exported = review.exported(s);
console.log(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="the page's script runs in Node.js, which is not installed")
def test_page_script_reveals_after_the_verdict_and_records_blindness(tmp_path) -> None:
    items = _graded(2, 2)  # t0#0 and t0#1 pass, t0#2 and t0#3 fail
    rendered = _Page(write_review(tmp_path, items, {}).read_text())
    script = "".join(rendered.scripts)
    run = subprocess.run(["node", "-e", script + _DRIVER], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["before"] is None and out["graderPassBefore"] == []  # no filter tells an unseen grade
    assert out["after"]["grade"] == "pass" and out["after"]["status"] == "passed"
    assert out["progress"] == {"reviewed": 3, "blind": 1, "total": 4}
    assert out["todo"] == ["t0#3"] and out["mine-pass"] == ["t0#1"] and out["mine-fail"] == ["t0#0", "t0#2"]
    assert out["grader-pass"] == ["t0#0", "t0#1"] and out["grader-fail"] == ["t0#2"]  # t0#3 never revealed
    assert out["disagree"] == ["t0#0"]
    assert out["exported"]["verdicts"]["t0#0"] == {"verdict": "fail", "note": "wrong rounding", "blind": True}
    # what the page saves is what review-import reads
    path = tmp_path / "verdicts.json"
    path.write_text(json.dumps(out["exported"]))
    verdicts = load_verdicts(path)
    assert verdicts["t0#0"] == Verdict("fail", True, "wrong rounding")
    assert verdicts["t0#1"].blind is False and verdicts["t0#2"] == Verdict("fail", False, "")
    result = agreement(items, verdicts)
    assert (result["blind"], result["after_reveal"], result["disagreements"]) == (1, 2, ["t0#0"])


def test_agreement_known_answer_from_blind_verdicts_only() -> None:
    # 50 blind verdicts: grader pass & human pass 20, grader pass & human fail 5, grader fail & human
    # pass 10, both fail 15. p_o = 35/50 = 0.7; grader passes 0.5, human passes 0.6, so
    # p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5 and kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    items = _graded(25, 25 + 3)
    keys = _keys(items)
    human = ["pass"] * 20 + ["fail"] * 5 + ["pass"] * 10 + ["fail"] * 15
    verdicts = {k: Verdict(v, True) for k, v in zip(keys, human)}
    # three more, all disagreeing, given after the grader's verdict was shown: left out, counted
    verdicts.update({k: Verdict("pass", False) for k in keys[50:]})
    result = agreement(items, verdicts)
    assert (result["reviewed"], result["blind"], result["after_reveal"]) == (53, 50, 3)
    assert result["agreement"] == pytest.approx(0.7)  # ratios of small integers: only float rounding
    assert result["kappa"] == pytest.approx(0.4)
    assert result["confusion"] == {"grader_pass_human_pass": 20, "grader_pass_human_fail": 5,
                                   "grader_fail_human_pass": 10, "grader_fail_human_fail": 15}
    assert len(result["disagreements"]) == 15 and result["disagreements_after_reveal"] == keys[50:]


def test_verdicts_that_do_not_say_blind_are_not_blind_and_bad_ones_are_refused(tmp_path) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"verdicts": {"t0#0": "pass", "t0#1": {"verdict": "fail", "note": "x"}}}))
    assert load_verdicts(path) == {"t0#0": Verdict("pass", False), "t0#1": Verdict("fail", False, "x")}
    result = agreement(_graded(2, 0), load_verdicts(path))
    assert result["blind"] == 0 and result["after_reveal"] == 2 and result["kappa"] != result["kappa"]  # NaN
    path.write_text(json.dumps({"verdicts": {"t0#0": "maybe"}}))
    with pytest.raises(ValueError, match="use one of pass, fail"):
        load_verdicts(path)
    path.write_text(json.dumps({"verdicts": {"t0#0": {"verdict": "pass", "blind": "yes"}}}))
    with pytest.raises(ValueError, match="'blind' for 't0#0' must be true or false"):
        load_verdicts(path)
    with pytest.raises(ValueError, match="not in the review"):
        agreement(_graded(1, 0), {"zzz#9": Verdict("pass", True)})


def test_review_import_command_reports_blind_agreement(tmp_path, capsys) -> None:
    from codemoe.core.cli import main

    items = _graded(2, 3)
    write_review(tmp_path, items, {})
    keys = _keys(items)
    given = [("pass", True), ("fail", True), ("fail", True), ("fail", True), ("pass", False)]
    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text(json.dumps({"verdicts": {k: {"verdict": v, "blind": b} for k, (v, b) in zip(keys, given)}}))
    assert main(["eval", "review-import", str(tmp_path), str(verdicts)]) == 0
    out = capsys.readouterr().out
    assert "reviewed 5 of 5 sampled, 4 blind; agreement 75.0%, Cohen's kappa 0.500 (blind verdicts only)" in out
    assert "left out: 1 verdicts given after the grader's verdict was shown" in out
    assert f"disagreement: {keys[1]}" in out and f"disagreement (given after the reveal, not counted): {keys[4]}" in out
    saved = json.loads((tmp_path / "review_agreement.json").read_text())
    assert saved["kappa"] == pytest.approx(0.5)  # p_o 0.75, p_e 0.5 over the four blind verdicts
