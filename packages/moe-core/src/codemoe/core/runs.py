"""Running a pipeline: the run directory, its metrics log, and stages in order.

A run directory holds ``config.yaml`` (the resolved config), ``run.log``, ``metrics.jsonl`` (one JSON
object per line: ``stage``, ``step``, ``time`` and the values) and ``state.json`` (the stages that
finished and what they returned). ``codemoe run --resume DIR`` skips finished stages; a stage that
was interrupted starts again and may pick up its own checkpoints from ``ctx.stage_dir``.

Under ``torchrun`` every rank runs the pipeline in the same run directory: rank 0 creates it and
hands its path to the launch's other ranks through the launch's key-value store (keyed by
``TORCHELASTIC_RUN_ID``; nodes must share the folder itself, which is checked); only rank 0 writes
``config.yaml``, ``state.json`` and ``metrics.jsonl``, and each other rank logs to ``run-rank<r>.log``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from codemoe.core.config import validate_pipeline
from codemoe.core.errors import CodemoeError, ConfigError
from codemoe.core.loggers import MetricLogger, build_loggers, scalars
from codemoe.core.plugins import Hooks
from codemoe.core.registry import Registry
from omegaconf import DictConfig, OmegaConf

__all__ = ["MetricsWriter", "RunContext", "StageInfo", "create_run_dir", "run_pipeline"]

log = logging.getLogger("codemoe")


class MetricsWriter:
    """Appends metric records to ``metrics.jsonl``; values must be JSON numbers, strings or bools.

    Every record's numbers also go to the run's ``loggers`` (``run.loggers``: TensorBoard, W&B, a
    plugin's; :mod:`codemoe.core.loggers`), as ``<stage>/<metric>`` at the record's step. A writer
    that is not ``enabled`` (a ``torchrun`` rank other than 0) writes nothing and has no loggers.
    """

    def __init__(self, path: Path, enabled: bool = True, loggers: Sequence[MetricLogger] = ()) -> None:
        self.path, self.enabled, self.loggers = path, enabled, list(loggers)

    def write(self, stage: str, step: int | None = None, **values: Any) -> None:
        if not self.enabled:
            return
        record = {"stage": stage, "step": step, "time": round(time.time(), 3)}
        record.update({key: _jsonable(value) for key, value in values.items()})
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.loggers:
            numbers = scalars(values)
            for logger in self.loggers:
                logger.log(stage, step, numbers)

    def close(self) -> None:
        """Close the loggers (flush event files, finish the W&B run); the JSONL needs nothing."""
        loggers, self.loggers = self.loggers, []
        for logger in loggers:
            logger.close()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):  # tensors and numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@dataclass(frozen=True)
class StageInfo:
    """Which stage is running: its id in the pipeline, its component name and validated config."""

    id: str
    name: str
    config: Any


@dataclass
class RunContext:
    """Everything a stage needs from the run; passed to stages and lifecycle hooks."""

    run_dir: Path
    config: DictConfig
    registry: Registry
    hooks: Hooks
    metrics: MetricsWriter
    seed: int
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    show_progress: bool = True

    @property
    def is_main(self) -> bool:
        """This process writes the run's shared files: rank 0 of a ``torchrun`` launch, or the only process.

        Stages that do the same work on every rank without collectives (evaluation, reports) run on
        the main process only; the others skip them.
        """
        return launch_rank()[0] == 0

    def stage_dir(self, stage: StageInfo | str) -> Path:
        """A folder of the run for one stage's files (checkpoints, samples); created on demand."""
        path = self.run_dir / (stage.id if isinstance(stage, StageInfo) else stage)
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Any]:
        """A rich progress bar; yields ``advance(n=1)``. Silent when progress is turned off."""
        if not self.show_progress:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, transient=False) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)


def launch_rank() -> tuple[int, int]:
    """(rank, world size) of this process in a ``torchrun`` launch; (0, 1) otherwise."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def create_run_dir(cfg: DictConfig, wait_s: float = 120.0) -> Path:
    """``<run.dir>/<run.name>-<UTC timestamp>``, made unique if two runs start in one second.

    In a ``torchrun`` launch rank 0 makes it and hands its path to the other ranks through the
    launch's own key-value store (``MASTER_ADDR:MASTER_PORT``), so ranks on other nodes get it
    without a shared file. They need to see the folder itself, though (every rank writes its logs
    and checkpoint shards there): one that does not is stopped here, with what to change.
    """
    rank, world = launch_rank()
    launch = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if world <= 1 or not launch:
        return _new_run_dir(cfg)
    store = _launch_store(wait_s)
    key = f"codemoe/run_dir/{launch}"
    if rank == 0:
        path = _new_run_dir(cfg)
        store.set(key, str(path))
        return path
    try:
        path = Path(store.get(key).decode())
    except RuntimeError as exc:  # the store's timeout
        raise CodemoeError(f"rank {rank}: rank 0 did not create the run directory within {wait_s:.0f}s ({exc})") from None
    if not path.is_dir():
        raise CodemoeError(
            f"rank {rank} on {socket.gethostname()}: the run directory rank 0 created, {path}, does not exist "
            "here. Every node writes its logs and checkpoint shards into it: put run.dir on a filesystem "
            "all nodes share (NFS, Lustre, a cloud file store), e.g. run.dir=/shared/runs"
        )
    return path


def _launch_store(wait_s: float) -> Any:
    """A client of the ``torchrun`` launch's TCP store (the one ``init_process_group`` joins)."""
    from datetime import timedelta

    import torch.distributed as dist

    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
    return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=wait_s))


def _new_run_dir(cfg: DictConfig) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = Path(cfg.run.dir).resolve() / f"{cfg.run.name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def _load_state(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"finished": {}}


def _save_state(run_dir: Path, state: Mapping[str, Any]) -> None:
    if launch_rank()[0] != 0:
        return
    tmp = run_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2, default=str))
    tmp.replace(run_dir / "state.json")


def _attach_log(run_dir: Path) -> logging.Handler:
    rank = launch_rank()[0]
    handler = logging.FileHandler(run_dir / ("run.log" if rank == 0 else f"run-rank{rank}.log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("codemoe").addHandler(handler)
    logging.getLogger("codemoe").setLevel(logging.INFO)
    return handler


def _quiet_library_progress() -> None:
    """The run's progress bars are codemoe's own (``ctx.progress``): transformers' bar for every
    checkpoint it writes ("Writing model shards") would break into them and into run.log."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # a pipeline of stages that never touch a model
        return
    hf_logging.disable_progress_bar()


def run_pipeline(
    cfg: DictConfig,
    registry: Registry,
    hooks: Hooks,
    *,
    run_dir: Path | None = None,
    show_progress: bool = True,
) -> RunContext:
    """Run the pipeline's stages in order and return the context (results by stage id).

    With ``run_dir`` given, the run resumes there: its saved config is used unless ``cfg`` is given
    as well, and stages recorded as finished in ``state.json`` are skipped.
    """
    stages = validate_pipeline(cfg, registry)
    _quiet_library_progress()
    if run_dir is None:
        run_dir = create_run_dir(cfg)
    elif not run_dir.is_dir():
        raise ConfigError(f"cannot resume: run directory {run_dir} does not exist")
    run_dir = run_dir.resolve()
    main = launch_rank()[0] == 0
    if main:
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    specs = OmegaConf.to_container(cfg.run, resolve=True).get("loggers") or []
    loggers = build_loggers(registry, specs, run_dir) if main else []  # before the log handler: may fail
    handler = _attach_log(run_dir)
    ctx = RunContext(
        run_dir=run_dir,
        config=cfg,
        registry=registry,
        hooks=hooks,
        metrics=MetricsWriter(run_dir / "metrics.jsonl", enabled=main, loggers=loggers),
        seed=int(cfg.run.seed),
        show_progress=show_progress,
    )
    state = _load_state(run_dir)
    try:
        for stage_id, name, stage_config in stages:
            stage = StageInfo(id=stage_id, name=name, config=stage_config)
            if stage_id in state["finished"]:
                log.info("stage %s already finished in %s; skipping", stage_id, run_dir)
                ctx.results[stage_id] = state["finished"][stage_id]
                continue
            ctx.results[stage_id] = _run_stage(ctx, stage)
            state["finished"][stage_id] = ctx.results[stage_id]
            _save_state(run_dir, state)
    finally:
        ctx.metrics.close()
        logging.getLogger("codemoe").removeHandler(handler)
        handler.close()
    return ctx


def _run_stage(ctx: RunContext, stage: StageInfo) -> dict[str, Any]:
    random.seed(ctx.seed)
    log.info("stage %s (%s) starting", stage.id, stage.name)
    ctx.hooks.before_stage(ctx=ctx, stage=stage)
    started = time.perf_counter()
    component = ctx.registry.get("stage", stage.name, where=f"stages.{stage.id}")
    runner = component.build(stage.config) if component.config is not None else component.build()
    try:
        result = runner.run(ctx, stage) or {}
    except Exception:
        log.exception("stage %s failed", stage.id)
        raise
    if not isinstance(result, Mapping):
        raise CodemoeError(f"stage '{stage.id}' returned {type(result).__name__}; stages return a mapping")
    result = dict(result)
    elapsed = time.perf_counter() - started
    ctx.metrics.write(stage.id, None, stage_seconds=round(elapsed, 3))
    log.info("stage %s finished in %.1fs", stage.id, elapsed)
    ctx.hooks.after_stage(ctx=ctx, stage=stage, result=result)
    return result
