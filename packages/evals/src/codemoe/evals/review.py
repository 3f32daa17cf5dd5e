"""Human review of automatic grades: a sample of graded episodes, one static page, and agreement.

Automatic grading misses "logic right, done differently" and hidden-test blind spots, so a share of
graded episodes (5-10%, 7% by default) goes to people. :func:`write_review` writes ``review.html``
and ``review.json`` (the sampled items); :func:`agreement` compares the reviewers' verdicts with
the grader's: raw agreement, Cohen's kappa and every disagreement.

The review is blind. A reviewer who sees the grader's verdict first tends to agree with it, which
inflates the very agreement the page exists to measure, so each item shows the prompt and the
completion only; the grader's verdict and its evidence (status, reason, test output, which would
tell the verdict) are revealed per item once the reviewer has given theirs, or when they ask to see
it first. Until then they are not in the page's markup at all: the page carries them base64-encoded
in its script and writes them into the item (as text, never as HTML) on reveal. The page shows how
many items are reviewed and filters by the reviewer's verdict or, for revealed items only, by the
grader's. The saved ``verdicts.json`` records for each verdict whether it was given blind; kappa
and agreement use the blind verdicts only, and those given after the reveal are counted apart.
"""

from __future__ import annotations

import base64
import html
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemoe.evals.grading import GradedSample
from codemoe.evals.tasks import CodeTask

__all__ = [
    "REVIEW_HTML",
    "REVIEW_JSON",
    "Verdict",
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


@dataclass(frozen=True)
class Verdict:
    """A reviewer's verdict on one item."""

    verdict: str  # "pass" or "fail"
    blind: bool  # given before the grader's verdict was shown (only these count for agreement)
    note: str = ""


def _item_html(n: int, sample: GradedSample, task: CodeTask | None) -> str:
    """One item as the reviewer first sees it: nothing of the grader's in it."""
    key = html.escape(_key(sample))
    prompt = html.escape(task.prompt if task else "")
    options = "".join(f'<label><input type="radio" name="{key}" value="{v}"> {v}</label> ' for v in VERDICTS)
    return (
        f'<section class="item" data-key="{key}">'
        f"<h2>{n}. {key}</h2>"
        f"<h3>Prompt</h3><pre>{prompt}</pre>"
        f"<h3>Completion</h3><pre>{html.escape(sample.completion)}</pre>"
        f"<p><b>Your verdict:</b> {options}"
        f'<input type="text" class="note" name="{key}:note" placeholder="note (optional)" size="50"> '
        "<button type='button' class='reveal'>show the grader's verdict first (your verdict then is not blind)</button></p>"
        "<div class='grader' hidden></div>"
        "</section>"
    )


def _grades(samples: Sequence[GradedSample]) -> str:
    """The grader's verdicts and evidence, keyed like the items, as base64 of UTF-8 JSON."""
    data = {
        _key(s): {"grade": "pass" if s.passed else "fail", "status": s.status, "reason": s.reason or "", "output": s.output}
        for s in samples
    }
    return base64.b64encode(json.dumps(data).encode()).decode("ascii")


# The page's script. ``review`` holds the state and every rule (no DOM: tests run it in Node);
# the functions below it only draw that state into the page.
_SCRIPT = """
const review = {
  decode(text) {
    return JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(text), c => c.charCodeAt(0))));
  },
  create(grades) { return {grades: grades, verdicts: {}, revealed: {}}; },
  // a verdict is blind when the grader's verdict of that item was not shown before it; giving one
  // shows the grader's verdict, so a verdict changed afterwards is not blind
  choose(state, key, verdict, note) {
    state.verdicts[key] = {verdict: verdict, note: note || '', blind: !state.revealed[key]};
    state.revealed[key] = true;
  },
  note(state, key, note) { if (state.verdicts[key]) state.verdicts[key].note = note; },
  reveal(state, key) { state.revealed[key] = true; },
  grade(state, key) { return state.revealed[key] ? state.grades[key] : null; },
  progress(state) {
    const given = Object.values(state.verdicts);
    return {reviewed: given.length, blind: given.filter(v => v.blind).length, total: Object.keys(state.grades).length};
  },
  // the grader's filters see revealed items only: filtering must not tell an unseen verdict
  matches(state, key, filter) {
    const mine = state.verdicts[key], theirs = review.grade(state, key);
    switch (filter) {
      case 'todo': return !mine;
      case 'mine-pass': return !!mine && mine.verdict === 'pass';
      case 'mine-fail': return !!mine && mine.verdict === 'fail';
      case 'grader-pass': return !!theirs && theirs.grade === 'pass';
      case 'grader-fail': return !!theirs && theirs.grade === 'fail';
      case 'disagree': return !!mine && !!theirs && mine.verdict !== theirs.grade;
      default: return true;
    }
  },
  exported(state) { return {format: 'codemoe-review/2', verdicts: state.verdicts}; },
};

function showGrade(section, state) {
  const g = review.grade(state, section.dataset.key);
  if (!g) return;
  const box = section.querySelector('div.grader');
  box.replaceChildren();
  const head = document.createElement('p');
  head.className = g.grade;
  head.textContent = 'grader: ' + g.grade + ' (' + g.status + ')';
  const out = document.createElement('pre');
  out.textContent = (g.reason ? g.reason + '\\n' : '') + g.output;
  const title = document.createElement('h3');
  title.textContent = 'Test output';
  box.append(head, title, out);
  box.hidden = false;
  section.querySelector('button.reveal').hidden = true;
}

function refresh(state) {
  const p = review.progress(state);
  document.getElementById('progress').textContent =
    p.reviewed + ' of ' + p.total + ' reviewed (' + p.blind + ' blind)';
  const filter = document.getElementById('filter').value;
  document.querySelectorAll('section.item').forEach(s => { s.hidden = !review.matches(state, s.dataset.key, filter); });
}

function saveVerdicts(state) {
  const blob = new Blob([JSON.stringify(review.exported(state), null, 2)], {type: 'application/json'});
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob); a.download = 'verdicts.json'; a.click();
}

if (typeof document !== 'undefined') document.addEventListener('DOMContentLoaded', () => {
  const state = review.create(review.decode(GRADES));
  document.querySelectorAll('section.item').forEach(section => {
    const key = section.dataset.key, note = section.querySelector('input.note');
    section.querySelectorAll('input[type=radio]').forEach(radio => radio.addEventListener('change', () => {
      review.choose(state, key, radio.value, note.value); showGrade(section, state); refresh(state);
    }));
    note.addEventListener('input', () => review.note(state, key, note.value));
    section.querySelector('button.reveal').addEventListener('click', () => {
      review.reveal(state, key); showGrade(section, state); refresh(state);
    });
  });
  document.getElementById('filter').addEventListener('change', () => refresh(state));
  document.querySelectorAll('button.save').forEach(b => b.addEventListener('click', () => saveVerdicts(state)));
  refresh(state);
});
"""

_FILTERS = (
    ("all", "all items"),
    ("todo", "not reviewed yet"),
    ("mine-pass", "my verdict: pass"),
    ("mine-fail", "my verdict: fail"),
    ("grader-pass", "grader: pass (revealed items)"),
    ("grader-fail", "grader: fail (revealed items)"),
    ("disagree", "the grader and I disagree"),
)

_STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:auto} pre{background:#f4f4f4;padding:.5em;"
    "white-space:pre-wrap} .pass{color:#070} .fail{color:#a00} section{border-bottom:1px solid #ccc}"
    " .bar{position:sticky;top:0;background:#fff;padding:.5em 0;border-bottom:1px solid #ccc}"
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
    filters = "".join(f"<option value='{v}'>{label}</option>" for v, label in _FILTERS)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style><script>const GRADES = '{_grades(samples)}';{_SCRIPT}</script></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{len(samples)} samples{of_total}. Mark each as pass (the completion "
        "solves the task as described) or fail before you look at the grader's verdict: it is shown once you "
        "have given yours. Then save the verdicts and import them with <code>codemoe eval review-import</code>; "
        "agreement counts the verdicts given blind.</p>"
        f"<div class='bar'><span id='progress'>0 of {len(samples)} reviewed</span> | show "
        f"<select id='filter'>{filters}</select> <button type='button' class='save'>Save verdicts.json</button></div>"
        f"{items}<button type='button' class='save'>Save verdicts.json</button></body></html>"
    )
    (folder / REVIEW_HTML).write_text(page)
    (folder / REVIEW_JSON).write_text(json.dumps({"items": [s.as_dict() for s in samples]}, indent=2))
    return folder / REVIEW_HTML


def load_verdicts(path: Path) -> dict[str, Verdict]:
    """Read a verdicts file: ``{"verdicts": {key: {"verdict": "pass"|"fail", "blind": bool, "note": ...}}}``.

    The page records ``blind`` with every verdict. A verdict that does not say it was given blind
    (a bare ``"pass"``, a file from a page that showed the grade first) is taken as not blind.
    """
    data = json.loads(Path(path).read_text())
    raw = data.get("verdicts", data) if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object mapping sample keys to verdicts")
    out = {}
    for key, value in raw.items():
        record = value if isinstance(value, dict) else {"verdict": value}
        if record.get("verdict") not in VERDICTS:
            raise ValueError(f"{path}: verdict for {key!r} is {record.get('verdict')!r}; use one of {', '.join(VERDICTS)}")
        if not isinstance(record.get("blind", False), bool):
            raise ValueError(f"{path}: 'blind' for {key!r} must be true or false, got {record['blind']!r}")
        out[str(key)] = Verdict(record["verdict"], record.get("blind", False), str(record.get("note") or ""))
    return out


def _kappa(pairs: Sequence[tuple[bool, bool]]) -> tuple[float, float]:
    """Raw agreement and Cohen's kappa of (grader passed, human passed) pairs."""
    n = len(pairs)
    if not n:
        return float("nan"), float("nan")
    rate = sum(g == h for g, h in pairs) / n
    g_pass = sum(g for g, _ in pairs) / n
    h_pass = sum(h for _, h in pairs) / n
    expected = g_pass * h_pass + (1 - g_pass) * (1 - h_pass)
    return rate, 1.0 if expected == 1.0 else (rate - expected) / (1 - expected)


def agreement(items: Sequence[GradedSample], verdicts: Mapping[str, Verdict]) -> dict[str, Any]:
    """Grader-human agreement on the items reviewed blind: rate, Cohen's kappa, confusion, disagreements.

    Kappa corrects the raw rate for chance: ``(p_o - p_e) / (1 - p_e)`` with ``p_e`` from the two
    raters' marginal pass rates; it is 1.0 for perfect agreement and 0 for chance level. Verdicts
    given after the grader's verdict was shown are left out of every figure and counted in
    ``after_reveal`` (their disagreements listed apart).
    """
    by_key = {_key(s): s for s in items}
    unknown = sorted(set(verdicts) - set(by_key))
    if unknown:
        raise ValueError(f"verdicts for samples that were not in the review: {unknown[:5]}")
    blind = sorted(k for k, v in verdicts.items() if v.blind)
    pairs = [(by_key[k].passed, verdicts[k].verdict == "pass") for k in blind]
    confusion = {
        f"grader_{'pass' if g else 'fail'}_human_{'pass' if h else 'fail'}": sum(1 for p in pairs if p == (g, h))
        for g in (True, False)
        for h in (True, False)
    }
    rate, kappa = _kappa(pairs)
    disagree = [k for k in sorted(verdicts) if by_key[k].passed != (verdicts[k].verdict == "pass")]
    return {
        "sampled": len(items),
        "reviewed": len(verdicts),
        "blind": len(blind),
        "after_reveal": len(verdicts) - len(blind),
        "agreement": rate,
        "kappa": kappa,
        "confusion": confusion,
        "disagreements": [k for k in disagree if verdicts[k].blind],
        "disagreements_after_reveal": [k for k in disagree if not verdicts[k].blind],
    }
