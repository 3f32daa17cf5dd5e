"""codemoe-evals: task suites, pass@k with confidence intervals, reports, human review, lm-eval.

Importing ``codemoe.evals`` imports neither torch nor the sandbox; stages load them when they run.
"""

from codemoe.evals.humaneval import HumanEvalSuite, HumanEvalSuiteConfig
from codemoe.evals.synthetic import SyntheticSuite, SyntheticSuiteConfig
from codemoe.evals.tasks import SPLITS, CodeTask, Suite, program

__all__ = [
    "SPLITS",
    "CodeTask",
    "HumanEvalSuite",
    "HumanEvalSuiteConfig",
    "Suite",
    "SyntheticSuite",
    "SyntheticSuiteConfig",
    "program",
]
