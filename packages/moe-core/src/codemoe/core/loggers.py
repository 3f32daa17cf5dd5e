"""Experiment trackers (component kind ``logger``): every metric a run writes also goes to them.

A run names its trackers in ``run.loggers`` (none by default)::

    run:
      loggers:
        - tensorboard                                  # event files in <run dir>/tensorboard
        - {name: wandb, project: codemoe, mode: offline}  # run files in <run dir>/wandb

:class:`codemoe.core.runs.MetricsWriter` appends each record to ``metrics.jsonl`` and hands the
same numbers to every logger, named ``<stage>/<metric>`` (``sft/loss``, ``rl/reward/pass``) at the
record's step; a record without a step (``stage_seconds``, the environment) is logged at step 0 by
TensorBoard and in the run summary by Weights & Biases. Strings are not metrics and stay in the
JSONL only; a nested list of numbers (an evaluation's ``expert_load[layer][expert]``) is flattened
to ``expert_load/<layer>/<expert>``.

A logger is a component like any other: a plugin registers its own with ``registry.register("logger",
name, factory, Config)``; the factory takes the config and ``run_dir`` and returns an object with
``log(stage, step, values)`` and ``close()``. The built-ins need an optional extra
(``pip install 'codemoe-core[tensorboard]'``, ``'codemoe-core[wandb]'``); without it the run stops
before its first stage with that command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from codemoe.core.errors import CodemoeError, ConfigError

__all__ = [
    "MetricLogger",
    "TensorBoardConfig",
    "TensorBoardLogger",
    "WandbConfig",
    "WandbLogger",
    "build_loggers",
    "build_tensorboard",
    "build_wandb",
    "scalars",
]

WANDB_MODES = ("offline", "online", "disabled")


class MetricLogger(Protocol):
    """What a ``logger`` component's factory returns."""

    def log(self, stage: str, step: int | None, values: Mapping[str, float]) -> None:
        """Record one metrics record's numbers (already flattened by :func:`scalars`)."""

    def close(self) -> None:
        """Flush and release files; called once when the run ends, also after a failure."""


def scalars(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a metrics record, flattened: bools count 0/1, nested number lists get index
    suffixes, strings and everything else are left out."""
    out: dict[str, float] = {}

    def add(key: str, value: Any) -> None:
        if hasattr(value, "item") and callable(value.item):  # tensors and numpy scalars
            value = value.item()
        if isinstance(value, (bool, int, float)):
            out[key] = float(value)
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            for i, item in enumerate(value):
                add(f"{key}/{i}", item)

    for key, value in values.items():
        add(key, value)
    return out


def build_loggers(registry: Any, specs: Sequence[Any], run_dir: Path) -> list[MetricLogger]:
    """Build every logger of ``run.loggers`` for ``run_dir``; one that fails closes those already built."""
    built: list[MetricLogger] = []
    try:
        for i, spec in enumerate(specs):
            built.append(registry.build("logger", spec, where=f"run.loggers[{i}]", run_dir=run_dir))
    except BaseException:
        for logger in built:
            logger.close()
        raise
    return built


def _missing_extra(what: str, extra: str, exc: ImportError) -> CodemoeError:
    return CodemoeError(
        f"run.loggers: the {what} logger needs its optional extra, which is not installed ({exc}). "
        f"Install it with: pip install 'codemoe-core[{extra}]' (or drop {what} from run.loggers)"
    )


# ---------------------------------------------------------------------------------------------
# TensorBoard
# ---------------------------------------------------------------------------------------------


@dataclass
class TensorBoardConfig:
    """Options of the ``tensorboard`` logger."""

    subdir: str = "tensorboard"  # event files go to <run dir>/<subdir>; `tensorboard --logdir` it
    flush_secs: int = 10  # the writer flushes at least this often (and always at the end of the run)


class TensorBoardLogger:
    """Scalars to TensorBoard event files through ``torch.utils.tensorboard.SummaryWriter``."""

    def __init__(self, config: TensorBoardConfig, run_dir: Path) -> None:
        try:
            import tensorboard  # noqa: F401  (torch's writer needs it; import it here for a clear error)
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise _missing_extra("tensorboard", "tensorboard", exc) from None
        self.log_dir = Path(run_dir) / config.subdir
        self.writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=config.flush_secs)

    def log(self, stage: str, step: int | None, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(f"{stage}/{key}", value, global_step=0 if step is None else step)

    def close(self) -> None:
        self.writer.close()


def build_tensorboard(config: TensorBoardConfig, *, run_dir: Path) -> TensorBoardLogger:
    """The ``tensorboard`` logger."""
    return TensorBoardLogger(config, run_dir)


# ---------------------------------------------------------------------------------------------
# Weights & Biases
# ---------------------------------------------------------------------------------------------


@dataclass
class WandbConfig:
    """Options of the ``wandb`` logger; ``offline`` needs no account and no network."""

    project: str = "codemoe"  # the W&B project the run belongs to
    mode: str = "offline"  # offline: run files under <run dir>/wandb (`wandb sync` them later) | online | disabled
    run_name: str | None = None  # the W&B run name; default: the run directory's name
    entity: str | None = None  # team or user (online mode)
    group: str | None = None  # groups runs in the W&B UI (e.g. one sweep)
    tags: list[str] = field(default_factory=list)  # labels to filter runs by in the W&B UI

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ConfigError(f"'mode': {self.mode!r} is not a W&B mode; use one of {', '.join(WANDB_MODES)}")


class WandbLogger:
    """Metrics to a Weights & Biases run; each stage has its own x axis, ``<stage>/step``.

    W&B wants one step that only grows, while each stage counts its own steps from 1, so records are
    logged without W&B's step and with ``<stage>/step`` as the stage's step metric
    (``define_metric``).
    """

    def __init__(self, config: WandbConfig, run_dir: Path) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise _missing_extra("wandb", "wandb", exc) from None
        run_dir = Path(run_dir)
        self.run = wandb.init(
            project=config.project,
            entity=config.entity,
            group=config.group,
            tags=list(config.tags),
            name=config.run_name or run_dir.name,
            mode=config.mode,
            dir=str(run_dir),
            settings=wandb.Settings(console="off", silent=True),
        )
        self._stages: set[str] = set()

    def log(self, stage: str, step: int | None, values: Mapping[str, float]) -> None:
        named = {f"{stage}/{key}": value for key, value in values.items()}
        if step is None:
            for key, value in named.items():
                self.run.summary[key] = value
            return
        if stage not in self._stages:
            self._stages.add(stage)
            self.run.define_metric(f"{stage}/step")
            self.run.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
        self.run.log({**named, f"{stage}/step": step})

    def close(self) -> None:
        self.run.finish()


def build_wandb(config: WandbConfig, *, run_dir: Path) -> WandbLogger:
    """The ``wandb`` logger."""
    return WandbLogger(config, run_dir)
