"""The root planner: which prefilled prompts read their common start from a root, and which root."""

from __future__ import annotations

from codemoe.serving.roots import Root, plan_roots

SYSTEM = list(range(100, 110))  # every prompt starts with these 10 tokens


def test_a_prompt_starting_with_a_running_root_joins_it():
    running = Root(slot=0, tokens=[*SYSTEM, 1, 2], groups=3)
    plan = plan_roots([[*SYSTEM, 1, 2, 3], [*SYSTEM, 1]], [running], minimum=4)
    assert plan.joins == [(0, running)]  # the second prompt is the root itself: it keeps a token of its own
    assert plan.runs == []


def test_neighbours_get_the_roots_that_save_the_most_tokens():
    task_a, task_b = [*SYSTEM, *range(20, 30)], [*SYSTEM, *range(40, 50)]
    prompts = [[*task_b, 7], [*task_a, 1], [5, 5, 5, 5, 5], [*task_a, 2], [*task_b, 8]]
    plan = plan_roots(prompts, [], minimum=4)
    # one root per task (20 tokens each) saves more than one root of the system prompt (10 tokens)
    assert plan.joins == []
    assert plan.runs == [([0, 4], 20), ([1, 3], 20)]  # in order of each run's first prefix slot


def test_prompts_sharing_less_than_the_minimum_get_no_root():
    plan = plan_roots([[*SYSTEM[:3], 1], [*SYSTEM[:3], 2]], [], minimum=4)
    assert plan.joins == [] and plan.runs == []
