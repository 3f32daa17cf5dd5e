"""Human review of automatic grades: a sample of graded episodes, one static page, and agreement.

Automatic grading misses "logic right, done differently" and hidden-test blind spots, so a share of
graded episodes (5-10%, 7% by default) goes to people. :func:`write_review` writes ``review.html``
(prompt, completion, test output, grade, and a verdict field per item; a button saves the verdicts
as JSON, no server needed) and ``review.json`` (the sampled items). :func:`agreement` compares the
reviewers' verdicts with the grader's: raw agreement, Cohen's kappa and every disagreement.
"""

from __future__ import annotations

import html
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codemoe.evals.grading import GradedSample
from codemoe.evals.tasks import CodeTask

__all__ = [
    "REVIEW_HTML",
    "REVIEW_JSON",
    "agreement",
    "load_verdicts",
    "sample_for_review",
    "write_review",
]

REVIEW_HTML = "review.html"
REVIEW_JSON = "review.json"
VERDICTS = ("pass", "fail")
MIN_FRACTION, MAX_FRACTION = 0.05, 0.10


def sample_for_review(graded: Sequence[GradedSample], fraction: float = 0.07, seed: int = 0) -> list[GradedSample]:
    """A ``fraction`` of the graded samples (at least one), drawn separately from passes and fails
    so that both kinds of grade are checked in proportion."""
    if not MIN_FRACTION <= fraction <= MAX_FRACTION:
        raise ValueError(f"review fraction must be between {MIN_FRACTION} and {MAX_FRACTION}, got {fraction}")
    if not graded:
        return []
    rng = random.Random(seed)
    chosen: list[GradedSample] = []
    for group in ([s for s in graded if s.passed], [s for s in graded if not s.passed]):
        if group:
            chosen.extend(rng.sample(group, max(1, round(fraction * len(group)))))
    return sorted(chosen, key=lambda s: (s.task_id, s.index))


def _key(sample: GradedSample) -> str:
    return f"{sample.task_id}#{sample.index}"


def _item_html(n: int, sample: GradedSample, task: CodeTask | None) -> str:
    key = html.escape(_key(sample))
    grade = "pass" if sample.passed else "fail"
    prompt = html.escape(task.prompt if task else "")
    options = "".join(f'<label><input type="radio" name="{key}" value="{v}"> {v}</label> ' for v in VERDICTS)
    return (
        f'<section class="item" data-key="{key}">'
        f"<h2>{n}. {key} <span class='{grade}'>grader: {grade} ({html.escape(sample.status)})</span></h2>"
        f"<h3>Prompt</h3><pre>{prompt}</pre>"
        f"<h3>Completion</h3><pre>{html.escape(sample.completion)}</pre>"
        f"<h3>Test output</h3><pre>{html.escape(sample.reason or '')}\n{html.escape(sample.output)}</pre>"
        f"<p><b>Your verdict:</b> {options}"
        f'<input type="text" name="{key}:note" placeholder="note (optional)" size="60"></p>'
        "</section>"
    )


_SCRIPT = """
function saveVerdicts() {
  const out = {};
  document.querySelectorAll('section.item').forEach(s => {
    const key = s.dataset.key;
    const picked = s.querySelector('input[type=radio]:checked');
    const note = s.querySelector('input[type=text]').value;
    if (picked) out[key] = {verdict: picked.value, note: note};
  });
  const blob = new Blob([JSON.stringify({verdicts: out}, null, 2)], {type: 'application/json'});
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob); a.download = 'verdicts.json'; a.click();
}
"""

_STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:auto} pre{background:#f4f4f4;padding:.5em;"
    "white-space:pre-wrap} .pass{color:#070} .fail{color:#a00} section{border-bottom:1px solid #ccc}"
)


def write_review(
    folder: Path,
    samples: Sequence[GradedSample],
    tasks: Mapping[str, CodeTask],
    *,
    title: str = "codemoe grading review",
    total: int | None = None,
) -> Path:
    """Write ``review.html`` and ``review.json`` into ``folder``; return the HTML path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    items = "".join(_item_html(i + 1, s, tasks.get(s.task_id)) for i, s in enumerate(samples))
    of_total = f" of {total} graded samples" if total is not None else ""
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{len(samples)} samples{of_total}. Mark each as pass (the "
        "completion solves the task as described) or fail, then save the verdicts and import them with "
        "<code>codemoe eval review-import</code>.</p>"
        f"<button onclick='saveVerdicts()'>Save verdicts.json</button>{items}"
        "<button onclick='saveVerdicts()'>Save verdicts.json</button></body></html>"
    )
    (folder / REVIEW_HTML).write_text(page)
    (folder / REVIEW_JSON).write_text(json.dumps({"items": [s.as_dict() for s in samples]}, indent=2))
    return folder / REVIEW_HTML


def load_verdicts(path: Path) -> dict[str, str]:
    """Read a verdicts file: ``{"verdicts": {key: "pass"|"fail"|{"verdict": ..., "note": ...}}}``."""
    data = json.loads(Path(path).read_text())
    raw = data.get("verdicts", data) if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object mapping sample keys to verdicts")
    out = {}
    for key, value in raw.items():
        verdict = value.get("verdict") if isinstance(value, dict) else value
        if verdict not in VERDICTS:
            raise ValueError(f"{path}: verdict for {key!r} is {verdict!r}; use one of {', '.join(VERDICTS)}")
        out[str(key)] = verdict
    return out


def agreement(items: Sequence[GradedSample], verdicts: Mapping[str, str]) -> dict[str, Any]:
    """Grader-human agreement on the reviewed items: rate, Cohen's kappa, confusion, disagreements.

    Kappa corrects the raw rate for chance: ``(p_o - p_e) / (1 - p_e)`` with ``p_e`` from the two
    raters' marginal pass rates; it is 1.0 for perfect agreement and 0 for chance level.
    """
    by_key = {_key(s): s for s in items}
    unknown = sorted(set(verdicts) - set(by_key))
    if unknown:
        raise ValueError(f"verdicts for samples that were not in the review: {unknown[:5]}")
    pairs = [(by_key[k].passed, verdicts[k] == "pass") for k in sorted(verdicts)]
    confusion = {
        f"grader_{'pass' if g else 'fail'}_human_{'pass' if h else 'fail'}": sum(1 for p in pairs if p == (g, h))
        for g in (True, False)
        for h in (True, False)
    }
    n = len(pairs)
    agree = sum(g == h for g, h in pairs)
    rate = agree / n if n else float("nan")
    if n:
        g_pass = sum(g for g, _ in pairs) / n
        h_pass = sum(h for _, h in pairs) / n
        expected = g_pass * h_pass + (1 - g_pass) * (1 - h_pass)
        kappa = 1.0 if expected == 1.0 else (rate - expected) / (1 - expected)
    else:
        kappa = float("nan")
    return {
        "sampled": len(items),
        "reviewed": n,
        "agreement": rate,
        "kappa": kappa,
        "confusion": confusion,
        "disagreements": [k for k in sorted(verdicts) if by_key[k].passed != (verdicts[k] == "pass")],
    }
