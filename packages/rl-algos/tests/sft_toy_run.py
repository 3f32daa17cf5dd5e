"""Run the SFT warm-up on a toy pattern and write each step's metrics to ``<out>/sft-rank<r>.jsonl``.

Started by the tests in one process and under ``torchrun`` (to compare ranks):
``python sft_toy_run.py OUT``; ``CODEMOE_TEST_PRECISION=bf16`` trains in mixed precision,
``CODEMOE_TEST_MICRO_BATCH=N`` in forwards of N rows (``micro_batch_size``). The last
line holds the dtypes of the (sharded) parameters after training.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from codemoe.core.models import build_model
from codemoe.core.moe import set_trainable
from codemoe.rl.distributed import init_distributed
from codemoe.rl.sft import Example, PhaseConfig, SFTConfig, SFTTrainer
from test_sft import SPEC


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    env = init_distributed()
    torch.manual_seed(0)
    model = build_model(SPEC)
    examples = [Example([p], [p + 1, p + 2, p + 3][: 1 + p % 3]) for p in range(3, 20)]  # uneven lengths
    # no balance term: it is a per-rank (micro-batch) statistic, so ranks would differ from one process
    phases = [PhaseConfig("router", 2, 1e-2), PhaseConfig("all", 3, 1e-2)]
    precision = os.environ.get("CODEMOE_TEST_PRECISION", "fp32")
    micro = int(os.environ.get("CODEMOE_TEST_MICRO_BATCH", "0"))
    config = SFTConfig(phases=phases, batch_size=8, balance_coef=0.0, precision=precision, micro_batch_size=micro)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    trainer = SFTTrainer(
        config,
        model,
        examples,
        pad_id=0,
        set_trainable=set_trainable,
        env=env,
        on_step=lambda step, metrics: lines.append(json.dumps({"step": step, **metrics})),
    )
    trainer.fit()
    master = sorted({str(p.dtype) for p in model.parameters()})  # the sharded (master) parameters
    lines.append(json.dumps({"master_dtypes": master}))
    (out / f"sft-rank{env.rank}.jsonl").write_text("\n".join(lines) + "\n")
    env.close()


if __name__ == "__main__":
    main()
