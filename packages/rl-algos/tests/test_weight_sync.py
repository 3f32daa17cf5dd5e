"""Weight sync from a sharded policy: rank 0 alone streams it, a parameter gathered at a time, and
every rank adopts the version it set; a refusal reaches every rank as an EngineError (no hang)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.distributed
def test_two_fsdp2_ranks_stream_the_whole_policy_to_one_server_from_rank_0(tmp_path):
    here = Path(__file__).parent
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    subprocess.run([*torchrun, str(here / "weight_sync_run.py"), str(tmp_path)], env=env, check=True, timeout=300)
    zero, one = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert zero["version"] is not None and one["version"] == zero["version"]  # both sample from the pushed weights
    assert zero["max_diff"] == 0.0  # whole parameters, moved and split, never recomputed
    assert "the weights were not loaded" in zero["refused"]  # the server's own reason, on rank 0
    assert one["refused"].startswith("rank 0 could not push the weights") and "the weights were not loaded" in one["refused"]
