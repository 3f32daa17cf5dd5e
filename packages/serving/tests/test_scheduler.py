"""Admission: waiting groups join the batch in order while slots and one prefill's budget allow."""

from __future__ import annotations

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.serving.inflight import groups_for
from codemoe.serving.kv_slots import KVSlots
from codemoe.serving.scheduler import Scheduler
from codemoe.serving.stopping import StopChecker


def _group(length: int, n: int):
    params = SamplingParams(n=n, max_new_tokens=4)
    (group,) = groups_for([1] * length, params, StopChecker(None, set(), [], 4, True), 0, 0, share_prefix=True)
    return group


def _scheduler(max_batch_size: int, max_prefill_tokens: int) -> Scheduler:
    return Scheduler(KVSlots(torch.device("cpu"), torch.float32, 0, 0), max_batch_size, max_prefill_tokens)


def test_admission_stops_at_the_prefill_budget_of_padded_tokens():
    scheduler = _scheduler(max_batch_size=8, max_prefill_tokens=10)
    groups = [_group(3, 2), _group(4, 1), _group(2, 1)]
    scheduler.submit(groups)
    # 3 tokens, then 2 prompts padded to 4 = 8, then 3 prompts padded to 4 = 12 > 10: the third waits
    assert scheduler.admit() == groups[:2]
    assert list(scheduler.waiting) == groups[2:]


def test_admission_stops_at_free_slots_and_a_long_prompt_still_goes_alone():
    scheduler = _scheduler(max_batch_size=4, max_prefill_tokens=10)
    long, wide = _group(50, 1), _group(2, 4)
    scheduler.submit([long, wide])
    assert scheduler.admit() == [long]  # over the budget on its own: admitted, or it would wait forever
    scheduler.start(long)
    assert scheduler.admit() == []  # 1 running + 4 samples > 4 slots
    assert scheduler.waiting_samples() == 4
