"""Agent episodes per second: codemoe's concurrent episodes against one at a time, in the same run.

Workload: ``--tasks`` agentic-core tasks (``registry/suites/agentic-core``) x ``--group`` episodes
each, at most ``--turns`` tool calls per episode, through the ``repo`` environment over the local
sandbox (``--workers`` warm workers, default one per CPU) with the embedded engine on the
``tiny_agent`` model (untrained weights, a tokenizer trained on the tasks' prompts, one torch
thread). Every episode ends graded: the visible and hidden tests on the original repository and on
the final workspace, two sandbox executions. Two cases:

- ``sampled``: the model's own actions. An untrained model writes no valid tool call, so every turn
  is a format error answered at once, and the sandbox runs only the final gradings.
- ``run_tests``: the same engine calls, but each action's text is replaced by a tool call chosen
  from its first sampled token: ``submit`` one time in three, else ``run_tests``. Episodes run the
  visible tests in the sandbox every turn until they submit, at different turns: the load of an
  agent that tests its work.

Sides (a fresh engine each, so no run reuses another's kept prefixes; the sides alternate for
``--rounds`` rounds and the table gives medians):

- codemoe: ``run_episodes`` as the trainer calls it (default cap: every episode here live at once);
- no admission: the same, each engine call sent the moment its episode is answered
  (``admission_window_s=0``), to show what sending the calls of episodes answered together buys;
- anchor, one at a time: ``run_episodes(concurrent=False)``, one turn of one episode at a time;
- previous: the turn-synchronous ``run_episodes`` the concurrent one replaced (each turn one batched
  generate call for every live episode, then each environment step in turn), loaded from git
  (``--previous REV``; skipped with ``--previous ''``).

    flock -x /tmp/codemoe-bench.lock .venv/bin/python benchmarks/bench_episodes.py --json runs/bench_episodes.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EPISODES_PATH = "packages/rl-algos/src/codemoe/rl/episodes.py"
PREVIOUS = "9c5e581^"  # the commit before concurrent episodes
RUN_TESTS = '<tool_call>{"tool": "run_tests", "args": {}}</tool_call>'
SUBMIT = '<tool_call>{"tool": "submit", "args": {"summary": "done"}}</tool_call>'


class ToolCallEngine:
    """The embedded engine, each sample's text replaced by a tool call chosen from its first token
    (the ``run_tests`` case); the token ids, log-probs and the work of sampling them are the engine's."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def encode(self, text: str) -> list[int]:
        return self.engine.encode(text)

    def generate(self, prompts: list[Any], params: Any) -> list[Any]:
        outputs = self.engine.generate(prompts, params)
        for output in outputs:
            for sample in output.samples:
                sample.text = SUBMIT if sample.token_ids and sample.token_ids[0] % 3 == 0 else RUN_TESTS
        return outputs


class Counter:
    """A count that threads add to."""

    def __init__(self) -> None:
        self.value, self._lock = 0, threading.Lock()

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.value += n


class Counted:
    """Makes the episodes' environments with ``make`` and counts their steps."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make, self.steps = make, Counter()

    def __call__(self) -> Any:
        env = self.make()
        step = env.step

        def counted(action: str, token_ids: list[int]) -> Any:
            self.steps.add()
            return step(action, token_ids)

        env.step = counted
        return env


class CountingExecutor:
    """The executor, counting executions (every test run and grading goes through ``run`` or ``run_batch``)."""

    def __init__(self, executor: Any) -> None:
        self.executor, self.executions = executor, Counter()

    def run(self, request: Any) -> Any:
        self.executions.add()
        return self.executor.run(request)

    def run_batch(self, requests: list[Any]) -> list[Any]:
        self.executions.add(len(requests))
        return self.executor.run_batch(requests)

    def close(self) -> None:
        self.executor.close()


def previous_run_episodes(rev: str) -> Callable[..., Any] | None:
    """``run_episodes`` as it was at ``rev`` (read with ``git show``); None when ``rev`` is empty."""
    if not rev:
        return None
    source = subprocess.run(["git", "show", f"{rev}:{EPISODES_PATH}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="codemoe-bench-")) / "previous_episodes.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("previous_episodes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.run_episodes


def setup(args: argparse.Namespace) -> tuple[Any, list[Any], Any, Any]:
    """The registry, the tasks, a tokenizer trained on their prompts, and the model."""
    import torch
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.core.models import build_model
    from codemoe.core.models.presets import load_preset
    from codemoe.core.tokenizer import train_tokenizer

    registry = build_registry(build_plugin_manager())
    tasks = registry.build("suite", {"name": "agentic-core", "heldout_percent": 0}).tasks("train")[: args.tasks]
    env = registry.build("environment", {"name": "repo", "step_budget": args.turns})
    prompts = [env.reset(task.task) for task in tasks]
    env.close()
    tokenizer = train_tokenizer(prompts, 1024)
    torch.manual_seed(args.seed)
    model = build_model(load_preset("tiny_agent"), vocab_size=len(tokenizer)).eval()
    return registry, tasks, tokenizer, model


def run_side(name: str, case: str, registry: Any, tasks: list[Any], tokenizer: Any, model: Any, executor: Any,
             runner: Callable[..., Any], args: argparse.Namespace) -> dict[str, float]:
    """One side's run of ``case``: wall seconds, episodes, and per episode its steps and executions."""
    from codemoe.core.chat import ChatFormat
    from codemoe.core.contracts import SamplingParams
    from codemoe.rl.repo_episodes import RepoEpisodes
    from codemoe.sandbox.rewards.presets import load_preset as load_reward_preset

    engine = registry.build("engine", {"name": "embedded", "prefix_cache_tokens": 65536}, model=model,
                            tokenizer=tokenizer)
    if case == "run_tests":
        engine = ToolCallEngine(engine)
    recipe = registry.build("reward", load_reward_preset("agent-stepwise"))
    counting = CountingExecutor(executor)
    spec = {"name": "repo", "step_budget": args.turns}
    chat = ChatFormat(tokenizer)
    make = Counted(lambda: RepoEpisodes(registry.build("environment", spec, executor=counting), recipe, chat))
    params = SamplingParams(n=args.group, max_new_tokens=args.new_tokens, seed=args.seed)
    options = {"one at a time": {"concurrent": False}, "no admission": {"admission_window_s": 0.0}}.get(name, {})
    start = time.perf_counter()
    rollouts = runner(engine, make, tasks, params, max_turns=args.turns, max_observation_tokens=args.observation_tokens,
                      pad_id=tokenizer.pad_token_id, **options)
    wall = time.perf_counter() - start
    episodes = len(rollouts.prompt_ids)
    return {"wall_s": wall, "episodes": episodes, "episodes_per_s": episodes / wall,
            "steps_per_episode": make.steps.value / episodes,
            "executions_per_episode": counting.executions.value / episodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="agentic-core tasks (of 20)")
    parser.add_argument("--group", type=int, default=4, help="episodes per task")
    parser.add_argument("--turns", type=int, default=4, help="tool calls per episode at most")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per action")
    parser.add_argument("--observation-tokens", type=int, default=128, help="observation tokens kept in the history")
    parser.add_argument("--workers", type=int, default=0, help="sandbox workers (0: one per CPU)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="sampled,run_tests")
    parser.add_argument("--previous", default=PREVIOUS, help="git revision of the previous run_episodes ('' skips it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import torch
    from codemoe.rl.episodes import run_episodes
    from codemoe.sandbox.local import LocalExecutor

    torch.set_num_threads(1)
    registry, tasks, tokenizer, model = setup(args)
    sides: dict[str, Callable[..., Any]] = {
        "codemoe": run_episodes, "no admission": run_episodes, "one at a time": run_episodes,
    }
    previous = previous_run_episodes(args.previous)
    if previous is not None:
        sides["previous"] = previous
    cases = args.cases.split(",")
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(c, s): [] for c in cases for s in sides}
    with LocalExecutor(workers=args.workers) as executor:
        for round_ in range(args.rounds + 1):  # round 0 warms the workers, the caches and the kernels up
            for case in cases:
                for side, runner in sides.items():
                    result = run_side(side, case, registry, tasks, tokenizer, model, executor, runner, args)
                    if round_:
                        runs[case, side].append(result)
                    print(f"round {round_} {case:10} {side:14} {result['episodes_per_s']:7.2f} episodes/s "
                          f"({result['wall_s']:.1f} s, {result['steps_per_episode']:.2f} steps and "
                          f"{result['executions_per_episode']:.2f} executions per episode)", file=sys.stderr)
        workers = executor.size
    shape = (f"{len(tasks)} agentic-core tasks x {args.group} episodes, <= {args.turns} turns of {args.new_tokens} "
             f"tokens, {workers} sandbox workers")
    print(f"Agent episodes ({shape}); median of {args.rounds} alternating rounds")
    print(f"{'case':12}{'side':16}{'episodes/s':>12}{'steps/ep':>10}{'exec/ep':>9}{'vs one at a time':>18}")
    table: dict[str, Any] = {}
    for case in cases:
        anchor = statistics.median(r["episodes_per_s"] for r in runs[case, "one at a time"])
        for side in sides:
            rate = statistics.median(r["episodes_per_s"] for r in runs[case, side])
            steps = statistics.mean(r["steps_per_episode"] for r in runs[case, side])
            execs = statistics.mean(r["executions_per_episode"] for r in runs[case, side])
            print(f"{case:12}{side:16}{rate:12.2f}{steps:10.2f}{execs:9.2f}{rate / anchor:17.2f}x")
        value = statistics.median(r["episodes_per_s"] for r in runs[case, "codemoe"])
        table[f"{case}: concurrent vs one at a time"] = {
            "codemoe": value, "anchor": anchor, "ratio": value / anchor, "units": "episodes/s", "shape": shape,
        }
        if "previous" in sides:
            before = statistics.median(r["episodes_per_s"] for r in runs[case, "previous"])
            table[f"{case}: concurrent vs previous turn-synchronous"] = {
                "codemoe": value, "anchor": before, "ratio": value / before, "units": "episodes/s", "shape": shape,
            }
    for name, row in table.items():
        print(f"ratio {name}: {row['ratio']:.2f}x")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cases": table, "runs": {f"{c}/{s}": r for (c, s), r in runs.items()}},
                                        indent=2))


if __name__ == "__main__":
    main()
