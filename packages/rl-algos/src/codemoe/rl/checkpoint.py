"""Training checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint is a folder ``step-NNNNNN`` holding the model and optimizer state through
``torch.distributed.checkpoint`` (sharded under FSDP2, resharded on load, so a run resumes on
another number of ranks), each rank's RNG states, and ``trainer.json`` (step, world size, data
cursor, monitor history). It is written to ``*.tmp`` and renamed
when complete, and ``latest`` names the newest complete one, so a run killed at any moment resumes
from its last complete checkpoint.

Under expert parallelism (``parallel.ep > 1``) each rank's experts are a ``DTensor`` slice of the
global ``[E, ...]`` weights (and so are their optimizer moments), so DCP records the one-process
keys and shapes with each rank's chunk at its offset, and the checkpoint loads on another
``(dp, ep)`` layout or in one process.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from codemoe.rl.distributed import Dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]

log = logging.getLogger("codemoe.rl")


@contextmanager
def _single_process_quiet() -> Iterator[None]:
    """torch warns that a process without a process group saves alone: that is the intent here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def _app_state(modules: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]) -> dict[str, Any]:
    state = {}
    for name, (module, optimizer) in modules.items():
        model_sd, optim_sd = get_state_dict(module, optimizer)
        state[f"{name}.model"] = model_sd
        state[f"{name}.optim"] = optim_sd
    return state


def save_checkpoint(
    folder: Path,
    step: int,
    modules: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]],
    trainer_state: dict[str, Any],
    env: Dist,
    keep: int = 2,
    export: Callable[[Path], Any] | None = None,
) -> Path:
    """Write ``folder/step-NNNNNN`` atomically and point ``folder/latest`` at it; keep the newest ``keep``.

    ``export(path)``, called on every rank, writes more into the checkpoint before it is complete
    (the trainer's policy as a model folder, ``step-NNNNNN/policy``)."""
    final = folder / f"step-{step:06d}"
    tmp = folder / f"step-{step:06d}.tmp"
    if env.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    env.barrier()
    with _single_process_quiet():
        dcp.save(_app_state(modules), checkpoint_id=str(tmp), no_dist=not env.enabled)
    torch.save(_rng_state(), tmp / f"rng-rank{env.rank}.pt")
    if export is not None:
        export(tmp / "policy")
    env.barrier()
    if env.is_main:
        (tmp / "trainer.json").write_text(json.dumps({"step": step, "world": env.world, **trainer_state}))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        (folder / "latest.tmp").write_text(final.name)
        (folder / "latest.tmp").replace(folder / "latest")
        for old in sorted(folder.glob("step-*[0-9]"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    env.barrier()
    return final


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint in ``folder``, or None."""
    pointer = folder / "latest"
    if not pointer.is_file():
        return None
    path = folder / pointer.read_text().strip()
    return path if (path / "trainer.json").is_file() else None


def load_checkpoint(
    path: Path, modules: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]], env: Dist
) -> dict[str, Any]:
    """Restore models, optimizers and this rank's RNG from ``path``; return the trainer state."""
    state = _app_state(modules)
    with _single_process_quiet():
        dcp.load(state, checkpoint_id=str(path), no_dist=not env.enabled)
    for name, (module, optimizer) in modules.items():
        set_state_dict(
            module,
            optimizer,
            model_state_dict=state[f"{name}.model"],
            optim_state_dict=state[f"{name}.optim"],
        )
    trainer_state = json.loads((path / "trainer.json").read_text())
    saved_world = int(trainer_state.pop("world", env.world))
    rng_file = path / f"rng-rank{env.rank}.pt"
    if saved_world == env.world and rng_file.is_file():
        _set_rng_state(torch.load(rng_file, weights_only=False))
    else:
        # another world size: models and optimizers are resharded by DCP, the data cursor and the
        # sampling seeds are global; only the per-rank RNG streams cannot carry over, so each rank
        # starts a fresh one from the step and its rank
        seed = 1_000_003 * int(trainer_state["step"]) + env.rank
        torch.manual_seed(seed)
        random.seed(seed)
        if env.is_main:
            log.warning("resuming a %d-rank checkpoint on %d ranks: per-rank RNG reseeded", saved_world, env.world)
    return trainer_state
