"""lm-eval: codemoe's tasks from local YAML, scored in the sandbox, a checkpoint through ``hf``."""

from __future__ import annotations

from pathlib import Path

import pytest
from codemoe.evals.lmeval import TASKS_DIR, run_lm_eval
from codemoe.evals.synthetic import SyntheticSuite, SyntheticSuiteConfig


def test_task_data_is_local_and_scoring_uses_the_sandbox() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("codemoe_lm_eval_utils", TASKS_DIR / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    docs = utils.synthetic_dataset(tasks=3)["test"]
    expected = SyntheticSuite(SyntheticSuiteConfig()).tasks("heldout")[:3]
    assert [d["id"] for d in docs] == [t.id for t in expected]
    assert len(utils.humaneval_dataset()["test"]) == 164
    doc = docs[0]
    assert utils.process_results(doc, [doc["reference_solution"]]) == {"pass@1": 1.0}
    assert utils.process_results(doc, ["    return None\n"]) == {"pass@1": 0.0}


@pytest.mark.slow
def test_checkpoint_through_lm_eval_hf_on_cpu(tiny_checkpoint: Path, capsys) -> None:
    results = run_lm_eval(tiny_checkpoint, ["codemoe_synthetic"], limit=4, batch_size=4)
    assert results["codemoe_synthetic"]["samples"] == 4
    assert results["codemoe_synthetic"]["pass@1"] == 0.0  # an untrained model solves nothing
    from codemoe.core.cli import main

    assert main(["eval", "lm-eval", str(tiny_checkpoint), "--limit", "2", "--batch-size", "2"]) == 0
    assert '"codemoe_synthetic"' in capsys.readouterr().out
    with pytest.raises(ValueError, match="codemoe's tasks"):
        run_lm_eval(tiny_checkpoint, ["mmlu"])
