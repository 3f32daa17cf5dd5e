"""Hook specifications: the few places where plugins meet codemoe.

Every spec follows one docstring template (checked by a test):

    summary line

    **Default:** what happens when no plugin implements it.

    :param <name>: one line per argument.
    :returns: what the caller does with the result.
    **firstresult:** yes or no.

Hooks sit at boundaries (start-up, stage edges, train steps), never inside ``forward()``.
A plugin implements a hook with ``@hookimpl`` (``pluggy.HookimplMarker("codemoe")`` works just as
well, so packages that do not depend on ``codemoe-core`` can still be plugins).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # the spine imports these modules; at run time the hooks need no types
    import argparse

    from codemoe.core.registry import Registry
    from codemoe.core.runs import RunContext, StageInfo

PROJECT = "codemoe"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ---------------------------------------------------------------------------------------------
# registration: called once when the plugin manager is built
# ---------------------------------------------------------------------------------------------


@hookspec
def codemoe_register_components(registry: Registry) -> None:
    """Register the components (routers, experts, stages, rewards, ...) this plugin provides.

    **Default:** nothing is registered; a plugin that registers nothing is still listed.

    :param registry: the :class:`codemoe.core.Registry`; call
        ``registry.register(kind, name, factory, config, summary=...)`` once per component. codemoe's
        packages keep one table of ``(kind, name, "module:factory", "module:Config", summary)`` rows
        in their plugin module and register every row here.
    :returns: nothing; registration happens through the ``registry`` argument.
    **firstresult:** no.
    """


# ---------------------------------------------------------------------------------------------
# command line: called once when ``codemoe`` builds its argument parser
# ---------------------------------------------------------------------------------------------


@hookspec
def codemoe_add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add subcommands to the ``codemoe`` command line (``codemoe serve``, ``codemoe sandbox``).

    **Default:** only the built-in commands (plugins, components, config, run) exist.

    :param subparsers: the ``argparse`` sub-parser action; call ``subparsers.add_parser(...)`` and
        ``set_defaults(handler=fn)`` where ``fn(args) -> int`` returns the exit code.
    :returns: nothing.
    **firstresult:** no.
    """


# ---------------------------------------------------------------------------------------------
# pipeline lifecycle: called by ``codemoe run`` around each stage
# ---------------------------------------------------------------------------------------------


@hookspec
def codemoe_before_stage(ctx: RunContext, stage: StageInfo) -> None:
    """Called before a pipeline stage starts.

    **Default:** nothing happens.

    :param ctx: the :class:`codemoe.core.RunContext` of the run (run dir, config, metrics).
    :param stage: the :class:`codemoe.core.StageInfo` (stage id, component name, config).
    :returns: nothing.
    **firstresult:** no.
    """


@hookspec
def codemoe_after_stage(ctx: RunContext, stage: StageInfo, result: dict[str, Any]) -> None:
    """Called after a pipeline stage finished without error.

    **Default:** nothing happens; the result is saved in the run's ``state.json`` either way.

    :param ctx: the :class:`codemoe.core.RunContext` of the run.
    :param stage: the :class:`codemoe.core.StageInfo` of the stage that finished.
    :param result: the mapping the stage returned (paths of artifacts, headline metrics).
    :returns: nothing.
    **firstresult:** no.
    """


# ---------------------------------------------------------------------------------------------
# training lifecycle: called by trainers
# ---------------------------------------------------------------------------------------------


@hookspec
def codemoe_after_train_step(ctx: RunContext, stage: StageInfo, step: int, metrics: dict[str, float]) -> None:
    """Called after each optimizer step of a trainer, once its metrics are read.

    **Default:** nothing happens; the metrics are already in ``metrics.jsonl``.

    :param ctx: the :class:`codemoe.core.RunContext` of the run.
    :param stage: the :class:`codemoe.core.StageInfo` of the training stage.
    :param step: the global step just completed (1-based).
    :param metrics: scalar metrics of the step (loss, reward mean, expert load, ...).
    :returns: nothing.
    **firstresult:** no.
    """


@hookspec
def codemoe_after_rollout_batch(ctx: RunContext, stage: StageInfo, step: int, batch: object) -> None:
    """Called after a batch of rollouts was generated and rewarded, before the update.

    **Default:** nothing happens.

    :param ctx: the :class:`codemoe.core.RunContext` of the run.
    :param stage: the :class:`codemoe.core.StageInfo` of the RL stage.
    :param step: the global step the batch belongs to (1-based).
    :param batch: the trainer's rollout batch (prompts, samples, rewards); monitors and curriculum
        filters may read it, and filters may mark samples to drop. Its type belongs to the trainer,
        not to core (``codemoe.rl.rollout.Rollouts`` for the built-in ``rl`` stage), hence ``object``.
    :returns: nothing.
    **firstresult:** no.
    """
