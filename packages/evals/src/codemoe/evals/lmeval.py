"""lm-eval integration: codemoe's suites as lm-eval tasks, a codemoe checkpoint through ``hf``.

The task YAMLs in ``lm_eval_tasks/`` (``codemoe_synthetic``, ``codemoe_humaneval``) read their data
from codemoe's suites (nothing from a hub) and score each generation on the hidden tests in
codemoe's sandbox. The model is lm-eval's own ``hf`` model class (``HFLM``) holding the checkpoint
that ``codemoe.core.models.load_pretrained`` loads, so codemoe's MoE blocks run exactly as trained.
On CPU::

    codemoe eval lm-eval runs/quickstart-<stamp>/rl/checkpoint --tasks codemoe_synthetic --limit 20

A plain ``transformers`` checkpoint can also be given, and the task folder works with lm-eval's own
command line (``lm_eval --model hf ... --include_path <TASKS_DIR> --tasks codemoe_synthetic``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["TASKS", "TASKS_DIR", "run_lm_eval"]

TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"
TASKS = ("codemoe_synthetic", "codemoe_humaneval")


def run_lm_eval(
    checkpoint: str | Path,
    tasks: Sequence[str] = ("codemoe_synthetic",),
    *,
    limit: int | None = None,
    batch_size: int = 8,
    device: str = "auto",
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate ``checkpoint`` with lm-eval's ``hf`` model on codemoe's tasks; returns
    ``{task: {"pass@1": value, "stderr": value, "samples": n}}``."""
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as exc:  # an optional integration
        raise ImportError("lm-eval is not installed: pip install 'codemoe-evals[lm-eval]'") from exc
    from codemoe.core.models import load_policy

    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise ValueError(f"unknown codemoe lm-eval task(s) {unknown}; codemoe's tasks: {', '.join(TASKS)}")
    from codemoe.core.devices import resolve_device

    target = resolve_device(device, key="--device")  # auto | cpu | cuda | cuda:N
    model, tokenizer = load_policy(checkpoint)
    model.to(target)
    output = lm_eval.simple_evaluate(
        model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(target)),
        tasks=list(tasks),
        task_manager=TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=metadata or {}),
        limit=limit,
        log_samples=False,
    )
    results = output["results"]
    return {
        task: {
            "pass@1": float(results[task]["pass@1,none"]),
            "stderr": results[task].get("pass@1_stderr,none"),
            "samples": int(output.get("n-samples", {}).get(task, {}).get("effective", 0)),
        }
        for task in tasks
    }
