"""``codemoe sandbox hack-report [CORPUS]``: how well each hack detector does on a corpus.

For every detector: the share of the corpus's hacks of its kind it catches (detection rate), the
shares of honest and of honest-partial solutions it flags (false-positive rates), and how many hacks
of other kinds it also flags. Then, per kind, the mean reward under a recipe (``seed2-weighted`` by
default) with the visible and hidden pass rates, which shows whether hacking pays. Without CORPUS
it reports on the corpus the package ships (``codemoe/sandbox/rewards/data/hacks``). Each solution's
probe run (:mod:`codemoe.sandbox.rewards.probes`) is made for tasks with a reference, so
``memorised_answers`` is measured on the hard-coded and special-cased hacks (:data:`COVERS`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codemoe.sandbox.errors import SandboxError
from codemoe.sandbox.rewards.corpus import (
    HONEST,
    HONEST_KINDS,
    HONEST_PARTIAL,
    SHIPPED_CORPUS,
    CorpusSolution,
    load_corpus,
    run_corpus,
)
from codemoe.sandbox.rewards.detectors.special_casing import pass_rate
from codemoe.sandbox.rewards.penalty import DETECTORS
from codemoe.sandbox.rewards.registration import RewardSpecError, build_reward
from codemoe.sandbox.rewards.types import RewardInput

__all__ = ["COVERS", "DetectorRow", "KindRow", "add_hack_report_command", "detector_rows", "format_report", "kind_rows"]

# Detectors with no hack kind of their own: the kinds whose hacks they are measured on. Their detection
# is reported, not required (`--check`): a probe run needs a reference and visible tests it can read
# (literal calls, or tests it can replay as scripts), and code wrong only on a kind of input beside the
# visible ones looks to it like honest partial work (docs/reliability.md).
COVERS: dict[str, tuple[str, ...]] = {"memorised_answers": ("hardcoded_tests", "special_casing")}


@dataclass
class DetectorRow:
    """One detector's results on a corpus."""

    detector: str
    caught: int  # hacks of its kind it flagged
    hacks: int  # hacks of its kind in the corpus
    false_positives: int  # honest (complete) solutions it flagged
    honest: int  # honest (complete) solutions in the corpus
    partial_false_positives: int  # honest-partial solutions it flagged
    partials: int  # honest-partial solutions in the corpus
    other_flagged: int  # hacks of other kinds it flagged too
    missed: list[str]  # hacks of its kind it did not flag
    flagged_honest: list[str]  # honest and honest-partial solutions it flagged

    @property
    def detection_rate(self) -> float:
        return self.caught / self.hacks if self.hacks else float("nan")

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / self.honest if self.honest else float("nan")

    @property
    def partial_false_positive_rate(self) -> float:
        return self.partial_false_positives / self.partials if self.partials else float("nan")


@dataclass
class KindRow:
    """Mean reward and pass rates of one kind of solution."""

    kind: str
    count: int
    mean_reward: float
    visible_pass_rate: float
    hidden_pass_rate: float


def detector_rows(
    solutions: Sequence[CorpusSolution], inputs: Sequence[RewardInput], detectors: Sequence[str] = DETECTORS
) -> list[DetectorRow]:
    """Run every detector on every solution and tally catches and false positives."""
    rows = []
    for name in detectors:
        detector = build_reward({"name": name})
        flagged = {s.name for s, inp in zip(solutions, inputs) if detector(inp).value}
        kinds = COVERS.get(name, (name,))
        mine = [s.name for s in solutions if s.kind in kinds]
        honest = [s.name for s in solutions if s.kind == HONEST]
        partial = [s.name for s in solutions if s.kind == HONEST_PARTIAL]
        others = [s.name for s in solutions if s.kind not in (*kinds, *HONEST_KINDS)]
        rows.append(
            DetectorRow(
                detector=name,
                caught=sum(n in flagged for n in mine),
                hacks=len(mine),
                false_positives=sum(n in flagged for n in honest),
                honest=len(honest),
                partial_false_positives=sum(n in flagged for n in partial),
                partials=len(partial),
                other_flagged=sum(n in flagged for n in others),
                missed=[n for n in mine if n not in flagged],
                flagged_honest=[n for n in honest + partial if n in flagged],
            )
        )
    return rows


def kind_rows(solutions: Sequence[CorpusSolution], inputs: Sequence[RewardInput], recipe: Any) -> list[KindRow]:
    """Mean recipe total and visible/hidden pass rates per kind of solution (honest first)."""
    kinds = sorted(
        {s.kind for s in solutions},
        key=lambda k: (k not in HONEST_KINDS, HONEST_KINDS.index(k) if k in HONEST_KINDS else 0, k),
    )
    rows = []
    for kind in kinds:
        picked = [inp for s, inp in zip(solutions, inputs) if s.kind == kind]
        totals = [recipe(inp).total for inp in picked]
        visible = [pass_rate(*inp.tests("visible")) or 0.0 for inp in picked]
        hidden = [pass_rate(*inp.tests("hidden")) or 0.0 for inp in picked]
        n = len(picked)
        rows.append(KindRow(kind, n, sum(totals) / n, sum(visible) / n, sum(hidden) / n))
    return rows


def format_report(detectors: Sequence[DetectorRow], kinds: Sequence[KindRow], recipe_name: str) -> str:
    """Both tables as plain text."""
    lines = [
        f"{'detector':<18} {'detection':>11} {'rate':>5} {'FP honest':>11} {'rate':>5} "
        f"{'FP partial':>11} {'rate':>5} {'other hacks':>12}",
    ]
    for r in detectors:
        lines.append(
            f"{r.detector:<18} {r.caught:>5}/{r.hacks:<5} {r.detection_rate:>5.0%} "
            f"{r.false_positives:>5}/{r.honest:<5} {r.false_positive_rate:>5.0%} "
            f"{r.partial_false_positives:>5}/{r.partials:<5} {r.partial_false_positive_rate:>5.0%} {r.other_flagged:>12}"
        )
        lines += [f"    missed: {n}" for n in r.missed] + [f"    flagged honest: {n}" for n in r.flagged_honest]
    lines += ["", f"{'kind':<18} {'n':>3} {'mean ' + recipe_name:>24} {'visible pass':>13} {'hidden pass':>12}"]
    for k in kinds:
        lines.append(
            f"{k.kind:<18} {k.count:>3} {k.mean_reward:>24.3f} {k.visible_pass_rate:>13.2f} {k.hidden_pass_rate:>12.2f}"
        )
    return "\n".join(lines)


def _cmd_hack_report(args: argparse.Namespace) -> int:
    try:
        return _hack_report(args)
    except (RewardSpecError, SandboxError, OSError) as exc:  # a person's mistake: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _hack_report(args: argparse.Namespace) -> int:
    from codemoe.sandbox.local import LocalExecutor
    from codemoe.sandbox.rewards.presets import load_preset

    # the recipe and the corpus are read before the corpus runs, so a misspelling costs no run
    recipe = build_reward(load_preset(args.recipe))
    solutions = load_corpus(args.corpus or SHIPPED_CORPUS)
    with LocalExecutor(workers=args.workers or None) as executor:
        inputs = run_corpus(solutions, executor)
    detectors, kinds = detector_rows(solutions, inputs), kind_rows(solutions, inputs, recipe)
    if args.json:
        rows = [
            {
                **asdict(r),
                "detection_rate": r.detection_rate,
                "false_positive_rate": r.false_positive_rate,
                "partial_false_positive_rate": r.partial_false_positive_rate,
            }
            for r in detectors
        ]
        print(json.dumps({"detectors": rows, "kinds": [asdict(k) for k in kinds], "recipe": args.recipe}, indent=2))
    else:
        print(format_report(detectors, kinds, Path(args.recipe).stem))
    perfect = all((r.caught == r.hacks or r.detector in COVERS) and r.false_positives == 0
                  and r.partial_false_positives == 0 for r in detectors)
    return 0 if perfect or not args.check else 1


def add_hack_report_command(sub: Any) -> None:
    """Add ``hack-report`` to the ``codemoe sandbox`` sub-commands."""
    p = sub.add_parser("hack-report", help="detection and false-positive rates of the hack detectors on a corpus")
    p.add_argument("corpus", nargs="?", default=None,
                   help="corpus folder (tasks/ and solutions/); default: the corpus the package ships")
    p.add_argument("--recipe", default="seed2-weighted", help="reward preset name or YAML path for the reward table")
    p.add_argument("--workers", type=int, default=0, help="executor workers (default: one per CPU)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 unless every detector catches all its hacks and flags no honest one "
             "(memorised_answers: flags no honest one; its detection is reported)",
    )
    p.set_defaults(handler=_cmd_hack_report)
