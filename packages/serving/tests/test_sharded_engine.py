"""The embedded engine over a model sharded with FSDP2 (a trainer's policy under ``torchrun``): it
keeps no copy, the ranks step together (``lockstep``) whatever each asks for, and it samples exactly
what an engine over the whole weights samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.distributed
@pytest.mark.parametrize("mode", ["per_block", "whole"])
def test_a_sharded_model_samples_what_the_whole_model_samples(tmp_path, mode):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*torchrun, str(HERE / "sharded_engine_run.py"), str(tmp_path), mode], env=env, check=True, timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["samples"] for r in ranks] == [9, 3]  # rank 0: two calls (3 prompts x 3), rank 1: one call
    for r in ranks:
        assert r["sharded_parameters"]  # the engine ran on shards, gathering one block at a time
        assert r["same_tokens"] and r["same_routing"], r
        # the same fp32 forward on gathered (exact) parameters: only the summation order of the
        # sharded and whole runs may differ, a few ulp of a log-softmax over 64 logits
        assert r["max_logprob_diff"] <= 1e-5, r
        assert "generate inside engine.lockstep()" in r["refused_outside_lockstep"]
    assert ranks[1]["lengths"] == [11]  # rank 1 decodes longer than rank 0 asks for: rank 0 joins in
