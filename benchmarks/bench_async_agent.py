"""Wall time per RL step on agent episodes with asynchronous rollouts (``max_staleness: 1``) against
the synchronous loop, against a real SGLang server and against the embedded engine, in one run on
one machine.

Workload: the first ``--tasks`` agentic-core tasks (``registry/suites/agentic-core``), the ``repo``
environment over the local sandbox (``--workers`` warm workers), episodes of at most ``--turns``
tool calls, ``agent-stepwise`` reward on the graded episode; GRPO (``presets/algos/grpo.yaml``)
with ``--group`` episodes per task and ``--prompts`` tasks per step; the ``tiny_agent`` model,
untrained, with a tokenizer trained on the tasks' prompts, saved with codemoe's ``save_pretrained``
and loaded by the server and the trainer alike. As in ``bench_episodes.py``'s ``run_tests`` case,
each action's text becomes a tool call (``submit`` one time in three, else ``run_tests``, chosen by
the request's sampling seed: the same on every side of a case, whatever the engine samples;
:class:`ToolCalls`), so episodes run the visible tests in the sandbox every turn until they submit:
the load of an agent that tests its work. The token ids and
log-probs stay the engine's, so the trainer trains on what the engine sampled.

Cases, each synchronous (``max_staleness: null``) then ``max_staleness: 1`` (``stale_groups:
wait``, ``in_flight: finish``), from the same checkpoint, on the same tasks and seeds (SGLang's CPU
path ignores the seeds, so its sides sample other tokens, but they run the same tool calls):

- ``sglang``: the ``sglang`` engine against ``SGLangServer`` (SGLang's CPU recipe, with room for
  the episodes' context), the weights pushed to the server after every update as the trainer does;
  the server's torch uses every core (SGLang's own default; ``SGLangServer`` now starts it on half
  the cores unless ``OMP_NUM_THREADS`` says otherwise, so this case sets it to every core);
- ``sglang_1thread``: the same with the server's torch on one thread (``OMP_NUM_THREADS=1``), so
  that generation leaves a core to the trainer's update, as the embedded engine's one thread does;
- ``embedded``: synchronously the embedded engine on the policy module itself (what the synchronous
  ``rl`` stage runs), asynchronously the embedded engine in a child process on a copy of the policy
  (``process: true``, what an asynchronous ``rl`` stage on CPU gets by default).

The first ``--warmup`` steps of each run are left out (the first asynchronous step waits for two
batches), and the last ``--tail`` (the last asynchronous step waits for no next batch before its
weight sync); the table gives the median of the steps between. Besides the step times it gives
the CPU time per step of the trainer's process and of the whole machine (``/proc/stat``: the
server or the engine's child, the sandbox's executions and anything else running count too), and
from the synchronous step's machine CPU the shortest step the cores allow: the ceiling an overlap
has where generation, the sandbox and the update all want the same cores.

    flock -x /tmp/codemoe-bench.lock .venv/bin/python benchmarks/bench_async_agent.py --json runs/bench_async_agent.json

``--rounds R`` runs each case's two sides R times in turn (synchronous, asynchronous, synchronous,
...) and pools the timed steps of each side, so a machine that speeds up or slows down during the
benchmark reaches both sides alike; it also prints the ratio of each round.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from machine_cpu import machine_busy_seconds

RUN_TESTS = '<tool_call>{"tool": "run_tests", "args": {}}</tool_call>'
SUBMIT = '<tool_call>{"tool": "submit", "args": {"summary": "done"}}</tool_call>'
CASES = {
    "sglang": "real SGLang server",
    "sglang_1thread": "real SGLang server, its torch on 1 thread",
    "embedded": "embedded engine (async: in a child process)",
}
SERVER_ENV = {"sglang": {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}, "sglang_1thread": {"OMP_NUM_THREADS": "1"}}
# SGLang's CPU recipe is sized for one short prompt at a time; an episode's history is the tool
# schemas and the task (about 1,000-1,500 tokens with this tokenizer) plus every action and
# observation, and a step runs every episode of its tasks at once
SGLANG_ARGS = ("--context-length", "4096", "--max-total-tokens", "65536", "--max-running-requests", "32")


class ToolCalls:
    """An engine whose samples' texts are tool calls chosen by the request's sampling seed and the
    sample's place (``submit`` one time in three, else ``run_tests``); everything else (token ids,
    log-probs, routing, weight updates, ``submit``/``collect``) is the engine's. The seeds are the
    trainer's (the same step, task, sample and turn give the same seed), so every side of a case
    runs the same tool calls, hence the same sandbox work and observations, even on an engine that
    ignores sampling seeds (SGLang's CPU path): what differs is only the tokens sampled.

    ``encode`` is the tokenizer's, for the engines that have none of their own (the ``sglang``
    engine and the embedded engine in a child process): an episode's prompt and observations are
    text, and :func:`codemoe.rl.episodes.run_episodes` encodes them with the engine's ``encode``.
    """

    def __init__(self, engine: Any, tokenizer: Any) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        self._seeds: dict[int, int] = {}  # id(handle) -> the seed of the request submitted for it
        if callable(getattr(engine, "submit", None)):
            self.submit = self._submit  # only where the engine queues requests (run_episodes checks for it)

    def __getattr__(self, name: str) -> Any:  # model, update_weights*, weights_changed, abort, collect, ...
        return getattr(self.engine, name)

    def _submit(self, prompt_ids: list[int], params: Any, **kwargs: Any) -> Any:
        handle = self.engine.submit(prompt_ids, params, **kwargs)
        self._seeds[id(handle)] = params.seed
        return handle

    def encode(self, text: str | list[int]) -> list[int]:
        own = getattr(self.engine, "encode", None)
        if own is not None:
            return own(text)
        if not isinstance(text, str):
            return list(text)
        encoded = self.tokenizer.encode(text)
        return list(getattr(encoded, "ids", encoded))

    def generate(self, prompts: list[Any], params: Any) -> list[Any]:
        outputs = self.engine.generate(prompts, params)
        return [self._as_tool_calls(output, (params.seed, p)) for p, output in enumerate(outputs)]

    def collect(self, prompt_ids: list[int], handle: Any) -> Any:
        return self._as_tool_calls(self.engine.collect(prompt_ids, handle), (self._seeds.pop(id(handle)), 0))

    @staticmethod
    def _as_tool_calls(output: Any, key: tuple[int, int]) -> Any:
        for i, sample in enumerate(output.samples):
            sample.text = SUBMIT if zlib.crc32(repr((*key, i)).encode()) % 3 == 0 else RUN_TESTS
        return output


def setup(args: argparse.Namespace, checkpoint: Path) -> tuple[Any, list[Any]]:
    """The registry and the tasks; writes the untrained ``tiny_agent`` policy and its tokenizer
    (trained on the tasks' prompts) to ``checkpoint``."""
    import torch
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.core.models import build_model, save_pretrained
    from codemoe.core.models.presets import load_preset
    from codemoe.core.tokenizer import train_tokenizer

    registry = build_registry(build_plugin_manager())
    tasks = registry.build("suite", {"name": "agentic-core", "heldout_percent": 0}).tasks("train")[: args.tasks]
    env = registry.build("environment", {"name": "repo", "step_budget": args.turns})
    prompts = [env.reset(task.task) for task in tasks]
    env.close()
    tokenizer = train_tokenizer(prompts, 1024)
    torch.manual_seed(args.seed)
    model = build_model(load_preset("tiny_agent"), vocab_size=len(tokenizer), registry=registry)
    save_pretrained(model, tokenizer, checkpoint)
    return registry, tasks


def algorithm(registry: Any, group: int) -> Any:
    """GRPO as codemoe-rl ships it, with ``group`` episodes per task."""
    import codemoe.rl

    spec = yaml.safe_load((Path(codemoe.rl.__file__).parent / "presets" / "algos" / "grpo.yaml").read_text())
    return registry.build("algorithm", {**spec, "group_size": group}, registry=registry)


def environment(registry: Any, executor: Any, recipe: Any, tokenizer: Any, turns: int) -> Callable[[], Any]:
    """One episode's environment, as ``RLStage._environment`` makes it for ``environment: repo``."""
    from codemoe.core.chat import ChatFormat
    from codemoe.rl.repo_episodes import RepoEpisodes

    chat = ChatFormat(tokenizer)
    spec = {"name": "repo", "step_budget": turns}
    return lambda: RepoEpisodes(registry.build("environment", spec, executor=executor), recipe, chat)


def run(name: str, k: int | None, engine_spec: Callable[[Any, Any], Any], checkpoint: Path, registry: Any,
        tasks: list[Any], executor: Any, args: argparse.Namespace, scratch: Path) -> list[dict[str, float]]:
    """One RL run of ``args.steps`` steps; each step's metrics. ``engine_spec(policy, tokenizer)``
    builds the engine the trainer drives."""
    from codemoe.core.models import load_pretrained
    from codemoe.rl.scoring import VerifierScorer
    from codemoe.rl.trainer import RLConfig, RLTrainer
    from codemoe.sandbox.rewards.presets import load_preset as load_reward_preset

    policy, tokenizer = load_pretrained(str(checkpoint), registry=registry)
    engine = ToolCalls(engine_spec(policy, tokenizer), tokenizer)
    recipe = registry.build("reward", load_reward_preset("agent-stepwise"))
    config = RLConfig(
        steps=args.steps,
        prompts_per_step=args.prompts,
        lr=args.lr,
        temperature=1.0,
        max_new_tokens=args.new_tokens,
        stop=[],
        checkpoint_every=10**6,
        seed=args.seed,
        max_turns=args.turns,
        max_observation_tokens=args.observation_tokens,
        max_staleness=k,
    )
    rows: list[dict[str, float]] = []
    busy = [machine_busy_seconds()]

    def on_step(step: int, metrics: dict[str, Any]) -> None:
        rows.append({key: float(v) for key, v in metrics.items() if isinstance(v, (int, float))})
        m = rows[-1]
        busy.append(machine_busy_seconds())
        m["machine_cpu_seconds"] = busy[-1] - busy[-2]  # since the previous step ended (the run's start)
        print(f"{name} step {step}: {m['step_seconds']:.2f} s (generation and episodes {m['gen_seconds']:.2f} s), "
              f"reward {m.get('reward_mean', float('nan')):.3f}, load {os.getloadavg()[0]:.2f}", file=sys.stderr)

    trainer = RLTrainer(
        config,
        algorithm(registry, args.group),
        policy,
        engine,
        VerifierScorer(executor, recipe),
        tasks,
        pad_id=tokenizer.pad_token_id,
        checkpoint_dir=scratch / name,
        on_step=on_step,
        environment=environment(registry, executor, recipe, tokenizer, args.turns),
    )
    try:
        trainer.fit()
    finally:
        close = getattr(engine.engine, "close", None)
        if close is not None:  # the embedded engine's child process
            close()
    return rows


def sglang_runs(case: str, checkpoint: Path, registry: Any, tasks: list[Any], executor: Any,
                args: argparse.Namespace, scratch: Path) -> dict[str, list[list[dict[str, float]]]]:
    """Synchronous then ``max_staleness: 1`` against one SGLang server on the checkpoint, ``args.rounds``
    times in turn; per side, each run's steps."""
    from codemoe.serving.sglang_server import SGLangServer

    out = {}
    started = time.perf_counter()
    with SGLangServer(checkpoint, extra_args=SGLANG_ARGS, extra_env=SERVER_ENV[case]) as server:
        print(f"SGLang server up in {time.perf_counter() - started:.0f} s", file=sys.stderr)

        def spec(policy: Any, tokenizer: Any) -> Any:
            return registry.build("engine", {"name": "sglang", "base_url": server.url}, model=policy,
                                  tokenizer=tokenizer)

        for r in range(args.rounds):  # the two sides alternate, so a drift of the machine reaches both
            for name, k in ((f"{case}_sync", None), (f"{case}_async", 1)):
                out.setdefault(name, []).append(run(f"{name}_{r}", k, spec, checkpoint, registry, tasks, executor,
                                                    args, scratch))
    return out


def embedded_runs(case: str, checkpoint: Path, registry: Any, tasks: list[Any], executor: Any,
                  args: argparse.Namespace, scratch: Path) -> dict[str, list[list[dict[str, float]]]]:
    """Synchronous (the engine on the policy module) then ``max_staleness: 1`` (the engine in a
    child process on a copy), as the ``rl`` stage builds them, ``args.rounds`` times in turn."""
    embedded = {"name": "embedded", "prefix_cache_tokens": 65536}  # later turns continue kept histories

    def on_policy(policy: Any, tokenizer: Any) -> Any:
        return registry.build("engine", embedded, model=policy, tokenizer=tokenizer)

    def in_process(policy: Any, tokenizer: Any) -> Any:
        return registry.build("engine", {**embedded, "process": True}, model=copy.deepcopy(policy),
                              tokenizer=tokenizer)

    out: dict[str, list[list[dict[str, float]]]] = {"embedded_sync": [], "embedded_async": []}
    for r in range(args.rounds):  # the two sides alternate, so a drift of the machine reaches both
        out["embedded_sync"].append(run(f"embedded_sync_{r}", None, on_policy, checkpoint, registry, tasks, executor,
                                        args, scratch))
        out["embedded_async"].append(run(f"embedded_async_{r}", 1, in_process, checkpoint, registry, tasks, executor,
                                         args, scratch))
    return out


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=9, help="RL steps of each run")
    parser.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of the step times")
    parser.add_argument("--tail", type=int, default=1, help="last steps of each run left out of the step times")
    parser.add_argument("--tasks", type=int, default=8, help="agentic-core tasks in the stream (of 20)")
    parser.add_argument("--prompts", type=int, default=2, help="tasks per step")
    parser.add_argument("--group", type=int, default=4, help="episodes per task (GRPO's group)")
    parser.add_argument("--turns", type=int, default=4, help="tool calls per episode at most")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per action")
    parser.add_argument("--observation-tokens", type=int, default=128, help="observation tokens kept in the history")
    parser.add_argument("--lr", type=float, default=2.0e-4)
    parser.add_argument("--workers", type=int, default=0, help="sandbox workers (0: one per CPU)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the trainer (and the engine)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each side per case, synchronous and asynchronous in turn (step medians pool them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import torch
    from codemoe.sandbox.local import LocalExecutor

    torch.set_num_threads(args.threads)
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"--cases: unknown {unknown}; choose from {', '.join(CASES)}")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    if args.steps - args.warmup - args.tail < 1:
        parser.error(f"--steps {args.steps} leaves no step between --warmup {args.warmup} and --tail {args.tail}")
    load = os.getloadavg()[0]
    started = time.perf_counter()
    steps: dict[str, list[list[dict[str, float]]]] = {}  # per side, each run's steps
    with tempfile.TemporaryDirectory(prefix="codemoe-bench-") as tmp:
        scratch = Path(tmp)
        registry, tasks = setup(args, scratch / "policy")
        with LocalExecutor(workers=args.workers) as executor:
            workers = executor.size
            for case in cases:
                runs = embedded_runs if case == "embedded" else sglang_runs
                steps.update(runs(case, scratch / "policy", registry, tasks, executor, args, scratch))
    wall = time.perf_counter() - started

    shape = (f"{args.prompts} of {len(tasks)} agentic-core tasks per step x {args.group} episodes, <= {args.turns} "
             f"turns of {args.new_tokens} tokens, {workers} sandbox workers, {args.steps} steps "
             f"(median of steps {args.warmup + 1}-{args.steps - args.tail}"
             + (f" of {args.rounds} runs a side, alternating)" if args.rounds > 1 else ")"))
    timed = slice(args.warmup, args.steps - args.tail)
    table, halves, waits, rounds = [], {}, {}, {}
    for case in cases:
        sync = [row for rows in steps[f"{case}_sync"] for row in rows[timed]]
        overlapped = [row for rows in steps[f"{case}_async"] for row in rows[timed]]
        rounds[case] = [round(median(a[timed], "step_seconds") / median(b[timed], "step_seconds"), 3)
                        for a, b in zip(steps[f"{case}_sync"], steps[f"{case}_async"], strict=True)]
        anchor, value = median(sync, "step_seconds"), median(overlapped, "step_seconds")
        table.append({"case": f"RL step on agent episodes, {CASES[case]}: max_staleness 1 vs synchronous",
                      "codemoe": round(value, 3), "anchor": round(anchor, 3), "ratio": round(anchor / value, 3),
                      "units": "s per step (median)", "shape": shape})
        table.append({"case": f"RL step on agent episodes, {CASES[case]}: CPU time of the trainer's process "
                      "(every thread; not the sandbox workers, the server, nor an engine's child process)",
                      "codemoe": round(median(overlapped, "cpu_seconds"), 3),
                      "anchor": round(median(sync, "cpu_seconds"), 3),
                      "ratio": round(median(sync, "cpu_seconds") / median(overlapped, "cpu_seconds"), 3),
                      "units": "CPU s per step (median)", "shape": shape})
        machine_sync, machine_async = median(sync, "machine_cpu_seconds"), median(overlapped, "machine_cpu_seconds")
        table.append({"case": f"RL step on agent episodes, {CASES[case]}: CPU time of the whole machine (every "
                      "process: trainer, engine or server, sandbox, and anything else running)",
                      "codemoe": round(machine_async, 3), "anchor": round(machine_sync, 3),
                      "ratio": round(machine_sync / machine_async, 3), "units": "CPU s per step (median)",
                      "shape": shape})
        whole_sync = sum(r["step_seconds"] for rows in steps[f"{case}_sync"] for r in rows)
        whole_async = sum(r["step_seconds"] for rows in steps[f"{case}_async"] for r in rows)
        table.append({"case": f"RL run, every step, {CASES[case]}: max_staleness 1 vs synchronous",
                      "codemoe": round(whole_async, 2), "anchor": round(whole_sync, 2),
                      "ratio": round(whole_sync / whole_async, 3), "units": "s", "shape": shape})
        # the synchronous step's two halves: a perfect overlap would take the longer one
        gen = median(sync, "gen_seconds")
        rest = statistics.median(r["step_seconds"] - r["gen_seconds"] for r in sync)
        cpu_floor = machine_sync / (os.cpu_count() or 1)  # the synchronous step's work on every core at once
        halves[case] = {"generation_episodes_s": gen, "rest_s": rest, "perfect_overlap_s": max(gen, rest),
                        "ceiling_ratio": (gen + rest) / max(gen, rest), "cpu_floor_s": cpu_floor,
                        "cpu_ceiling_ratio": (gen + rest) / max(gen, rest, cpu_floor)}
        waits[case] = {"rollout_wait_s": median(overlapped, "rollout_wait_seconds"),
                       "producer_s": median(overlapped, "producer_seconds"),
                       "sync_wait_s": median(overlapped, "sync_wait_seconds")}

    print(f"Asynchronous RL on agent episodes ({shape})")
    print("| case | asynchronous | synchronous | ratio | units |")
    print("|---|---|---|---|---|")
    for c in table:
        print(f"| {c['case']} | {c['codemoe']} | {c['anchor']} | **{c['ratio']}x** | {c['units']} |")
    for case in cases:
        h, w = halves[case], waits[case]
        print(f"{CASES[case]}: synchronous step = generation and episodes {h['generation_episodes_s']:.3f} s + the rest "
              f"{h['rest_s']:.3f} s (median): a perfect overlap would take {h['perfect_overlap_s']:.3f} s, "
              f"{h['ceiling_ratio']:.2f}x; its work takes {h['cpu_floor_s'] * (os.cpu_count() or 1):.3f} CPU s of the "
              f"machine, so on {os.cpu_count()} cores no step is shorter than {h['cpu_floor_s']:.3f} s "
              f"({h['cpu_ceiling_ratio']:.2f}x at most); asynchronous: the trainer waited {w['rollout_wait_s']:.3f} s per step for "
              f"rollouts, the producer spent {w['producer_s']:.3f} s per batch, the weight sync waited "
              f"{w['sync_wait_s']:.3f} s (medians)")
    if args.rounds > 1:
        for case in cases:
            print(f"{CASES[case]}: ratio of each round's step medians: {rounds[case]}")
    curves = {f"{name}_{i}": [round(r.get("reward_mean", float("nan")), 4) for r in rows]
              for name, runs in steps.items() for i, rows in enumerate(runs)}
    for name, curve in curves.items():
        print(f"reward_mean per step, {name}: {curve}")
    after = os.getloadavg()[0]
    print(f"whole benchmark {wall:.0f} s; load average before / after: {load:.2f} / {after:.2f} on {os.cpu_count()} cores")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cases": table, "sync_halves": halves, "async_waits": waits, "round_ratios": rounds, "reward_mean": curves,
            "load_average": {"before": load, "after": after, "cores": os.cpu_count()}, "wall_s": wall,
            "steps": steps,
        }, indent=2))


if __name__ == "__main__":
    main()
