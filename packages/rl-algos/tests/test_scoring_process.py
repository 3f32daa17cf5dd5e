"""The scorer in a child process of its own: the same scores as in the trainer's process, computed by
a child that owns the sandbox's workers; its errors and its death reach the caller by name."""

from __future__ import annotations

import operator
import os
import pickle
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from codemoe.core.contracts import GenerationOutput, Sample
from codemoe.core.errors import ConfigError
from codemoe.rl.scoring import VerifierScorer
from codemoe.rl.scoring_process import ProcessScorer, ScorerProcessError, portable_parts


@dataclass
class _Task:
    id: str
    prompt: str
    visible_tests: str
    hidden_tests: str = "assert False  # never sent to the scorer's child"


def _output(texts: list[str]) -> GenerationOutput:
    return GenerationOutput([1], [Sample([1], t, [0.0], "stop") for t in texts])


TASKS = [
    _Task("inc", "def f(x):\n", "assert f(1) == 2\nassert f(5) == 6\n"),
    _Task("neg", "def g(x):\n", "assert g(1) == -1\nassert g(0) == 0\n"),
]
OUTPUTS = [
    _output([
        "    return x + 1\n",
        "    return x\n",  # fails
        "    return x +\n",  # does not compile
        "    return x + 1\n",  # the first sample again: checked once
        "    import builtins\n    builtins.AssertionError = Exception\n    return 0\n",  # tampers with the checks
    ]),
    _output([
        "    return -x\n",
        "    import sys\n    sys.exit(0)\n",  # leaves before the checks run
        "    while True:\n        pass\n",  # runs out of time
    ]),
]


def _children(pid: int) -> set[int]:
    """PIDs of ``pid``'s live child processes."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        out.update(int(c) for c in children)
    return out


@pytest.fixture(scope="module")
def recipe(registry):
    from codemoe.core.config import load_preset

    folders = [folder / "rewards" for folder in registry.preset_dirs]
    return registry.build("reward", load_preset(folders, "seed2-weighted", "reward"))


def _scorer(registry, recipe, **options) -> ProcessScorer:
    factory, config = registry.portable("executor", {"name": "local", "workers": 2})
    return ProcessScorer(portable_parts(factory, config, recipe, "stages.rl.scorer_process"), **options)


def test_the_child_scores_every_sample_as_the_trainers_process_does(registry, recipe):
    executor = registry.build("executor", {"name": "local", "workers": 2})
    try:
        here = VerifierScorer(executor, recipe, timeout_s=1.0)
        expected = here(TASKS, OUTPUTS)
    finally:
        executor.close()
    scorer = _scorer(registry, recipe, timeout_s=1.0)
    try:
        got = scorer(TASKS, OUTPUTS)
        again = scorer(TASKS, OUTPUTS)  # the child serves call after call
    finally:
        scorer.close()
    assert got == expected == again  # rewards, pass flags and every logged component, to the bit
    assert [s.passed for s in got] == [True, False, False, True, False, True, False, False]
    assert got[4].components["hack_penalty/runner_tampering"] == 1.0  # the detectors ran in the child
    assert got[4].reward < got[1].reward < got[0].reward
    assert (scorer.checked, scorer.samples) == (2 * (here.checked), 2 * here.samples) == (14, 16)


def test_the_sandbox_workers_are_the_childs_and_end_with_it(registry, recipe):
    before = _children(os.getpid())
    scorer = _scorer(registry, recipe)
    child = scorer.pid
    assert child != os.getpid() and _children(os.getpid()) - before == {child}  # no worker of this process
    workers = _children(child)
    assert len(workers) == 2  # the executor's two warm workers run under the child
    scorer(TASKS[:1], OUTPUTS[:1])
    scorer.close()
    for pid in (child, *workers):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    with pytest.raises(ScorerProcessError, match="closed"):
        scorer(TASKS, OUTPUTS)


def test_an_error_in_the_childs_recipe_is_raised_here_as_itself(registry):
    factory, config = registry.portable("executor", {"name": "local", "workers": 1})
    # a recipe with a bug: it calls what a reward input does not have (a test module's own class would
    # not do: under pytest's importlib mode the child cannot import it by name to unpickle it)
    broken = operator.methodcaller("no_such_method")
    scorer = ProcessScorer(portable_parts(factory, config, broken, "stages.rl.scorer_process"))
    try:
        with pytest.raises(AttributeError, match="no attribute 'no_such_method'"):
            scorer(TASKS[:1], [_output(["    return x + 1\n"])])
    finally:
        scorer.close()


def test_a_child_that_dies_fails_the_call_in_flight_and_every_later_one(registry, recipe):
    scorer = _scorer(registry, recipe, timeout_s=20.0)
    slow = [_output(["    import time\n    time.sleep(15)\n    return x + 1\n"])]
    threading.Timer(1.0, os.kill, (scorer.pid, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(ScorerProcessError, match=r"exited \(exit code -9\)"):
        scorer(TASKS[:1], slow)
    assert time.monotonic() - started < 14  # the death is noticed, not the sandbox's timeout waited out
    with pytest.raises(ScorerProcessError, match="exit code -9"):
        scorer(TASKS, OUTPUTS)
    scorer.close()


def test_a_child_that_stops_answering_is_killed_at_the_batchs_deadline(registry, recipe):
    """A child that neither answers nor dies (here stopped with SIGSTOP) does not hold the trainer
    forever: past the batch's deadline (every program's timeout twice over, plus the slack: 1 + 2 x
    0.5 s here) it is killed, the call fails naming the deadline, and so does every later one. Its
    sandbox workers end with it."""
    scorer = _scorer(registry, recipe, timeout_s=0.5, answer_slack_s=1.0)
    workers = _children(scorer.pid)
    os.kill(scorer.pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(ScorerProcessError, match=r"did not answer within 2 s and was killed \(exit code -9\)"):
        scorer(TASKS[:1], OUTPUTS[:1])
    assert time.monotonic() - started < 10
    with pytest.raises(ScorerProcessError, match="was killed"):
        scorer(TASKS, OUTPUTS)
    scorer.close()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers)


def _alive(pid: int) -> bool:
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False


def test_what_cannot_cross_to_a_child_is_a_config_error_naming_the_key(registry):
    factory, config = registry.portable("executor", "local")
    with pytest.raises(ConfigError, match=r"'stages\.rl\.scorer_process'.*does not pickle.*scorer_process: false"):
        portable_parts(factory, config, lambda reward_input: None, "stages.rl.scorer_process")
    # an executor's factory and config cross as themselves: what the child builds is the configured one
    factory, config = pickle.loads(pickle.dumps(registry.portable("executor", {"name": "local", "workers": 3})))
    assert config.workers == 3


def test_a_child_that_cannot_build_its_verifier_says_why(registry, recipe):
    factory, config = registry.portable("executor", {"name": "local", "workers": 1, "start_timeout_s": 1e-9})
    with pytest.raises(ScorerProcessError, match="did not start: .*"):
        ProcessScorer(portable_parts(factory, config, recipe, "stages.rl.scorer_process"))


def test_scorer_process_true_with_agent_episodes_is_refused_by_key():
    from codemoe.rl.stages import RLStageConfig

    with pytest.raises(ConfigError, match="'scorer_process'.*environment"):
        RLStageConfig(scorer_process=True, environment={"name": "repo"})
    assert RLStageConfig(max_staleness=1).scores_in_process is False  # null: asynchronous scores in a child
    assert RLStageConfig().scores_in_process is True  # the synchronous loop keeps the in-process scorer
    assert RLStageConfig(max_staleness=1, environment={"name": "repo"}).scores_in_process is True
    assert RLStageConfig(max_staleness=1, scorer_process=False).scores_in_process is True
    assert RLStageConfig(scorer_process=True).scores_in_process is False


def test_a_recipe_the_child_cannot_rebuild_is_scored_in_process_unless_the_child_is_asked_for(
    registry, recipe, caplog
):
    """A recipe whose class lives only in the trainer's process (a script's ``__main__``, here a
    module made at run time) pickles here but cannot be unpickled in the child: ``scorer_process:
    null`` then scores in the trainer's process, saying why; ``true`` is an error that says why."""
    import sys
    import types

    from codemoe.rl.stages import RLStageConfig, process_scorer

    module = types.ModuleType("codemoe_made_in_this_process")

    class Recipe:
        def __call__(self, reward_input):
            return None

    Recipe.__module__, Recipe.__qualname__ = module.__name__, "Recipe"
    module.Recipe = Recipe
    sys.modules[module.__name__] = module
    try:
        with caplog.at_level("WARNING", logger="codemoe.rl"):
            assert process_scorer(RLStageConfig(max_staleness=1), registry, "stages.rl", Recipe()) is None
        assert "stages.rl.scorer_process: scoring in the trainer's process" in caplog.text
        assert "codemoe_made_in_this_process" in caplog.text
        with pytest.raises(ScorerProcessError, match="did not start.*codemoe_made_in_this_process"):
            process_scorer(RLStageConfig(max_staleness=1, scorer_process=True), registry, "stages.rl", Recipe())
    finally:
        del sys.modules[module.__name__]
    scorer = process_scorer(RLStageConfig(max_staleness=1), registry, "stages.rl", recipe)
    try:
        assert isinstance(scorer, ProcessScorer)
    finally:
        scorer.close()
    assert process_scorer(RLStageConfig(), registry, "stages.rl", recipe) is None  # synchronous: in-process
