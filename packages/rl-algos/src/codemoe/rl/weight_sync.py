"""How the policy's new weights reach the engine after an update, by what the engine is.

1. The engine runs the policy module itself (the embedded engine built on the trainer's policy):
   it already reads the new weights and only drops what it kept of the old ones
   (``weights_changed()``).
2. Every rank has an engine of its own (an embedded engine on a copy): each is sent the whole
   state dict.
3. One server or fleet behind every rank's client (``serves_every_rank``: the remote engines):
   rank 0 alone pushes, and no rank samples before the servers hold the weights (the others adopt
   the ``weight_version`` the update set). An engine that streams (``update_weights_from_tensors``,
   the ``sglang`` engine) is handed the parameters one at a time, in ``state_dict()`` order, each
   gathered whole from its shards when it comes (under FSDP2 a collective every rank joins, so no
   rank ever holds more than one whole parameter beyond its shard); the engine sends them in
   buckets. Any other engine gets the whole state dict.

A failure on rank 0 mid-stream (a server refusing a bucket) still lets the other ranks' gathers
finish, and then every rank raises the same :class:`~codemoe.core.errors.EngineError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from codemoe.core.contracts import EngineError

__all__ = ["full_parameters", "runs_policy", "sync_engine", "takes_whole_state", "whole_state"]


def full_parameters(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, whole tensor)`` for every entry of ``model.state_dict()``, in order, detached; a
    sharded one (a DTensor) is gathered when it is reached (a collective: every rank must iterate)."""
    from torch.distributed.tensor import DTensor

    for name, value in model.state_dict().items():
        if isinstance(value, DTensor):
            value = value.full_tensor()
        yield name, value.detach()


def takes_whole_state(engine: Any, policy: Any) -> bool:
    """Whether ``engine`` is sent the whole state dict (case 2 of the module docstring): a caller
    may then gather it first (:func:`whole_state`, :func:`sync_engine`'s ``state``), so that the
    collective and the update happen apart."""
    return not runs_policy(engine, policy) and not getattr(engine, "serves_every_rank", False)


def sync_engine(engine: Any, policy: Any, env: Any, state: dict[str, torch.Tensor] | None = None) -> None:
    """Make ``engine`` sample from ``policy``'s current weights (see the module docstring).
    ``state``: the whole state dict, already gathered by :func:`whole_state` (only for an engine
    :func:`takes_whole_state` says takes one); this call then makes no collective."""
    if state is not None:
        engine.update_weights(state_dict=state)
        return
    if runs_policy(engine, policy):
        engine.weights_changed()  # (a remote engine holds the policy too, for its config: not this case)
        return
    shared = getattr(engine, "serves_every_rank", False)
    if not shared:
        engine.update_weights(state_dict=whole_state(policy, env))  # each rank's own engine
        return
    main = env.is_main if env.enabled else True
    error = None
    if hasattr(engine, "update_weights_from_tensors"):
        stream = full_parameters(policy)
        if main:
            try:
                engine.update_weights_from_tensors(stream)
            except EngineError as exc:
                error = str(exc)
        for _ in stream:  # the rest of the gathers (the other ranks, or after a failure): every rank joins
            pass
    elif main:
        try:
            engine.update_weights(state_dict=whole_state(policy, env))
        except EngineError as exc:
            error = str(exc)
    else:
        whole_state(policy, env)  # the gathers rank 0's state dict needs
    if not env.enabled:
        if error:
            raise EngineError(error)
        return
    version = getattr(engine, "weight_version", None) if main else None
    answers = env.all_gather((version, error))  # also the barrier: no rank samples before the servers hold them
    if answers[0][1]:
        raise EngineError(answers[0][1] if main else f"rank 0 could not push the weights: {answers[0][1]}")
    if not main and hasattr(engine, "weight_version"):
        engine.weight_version = answers[0][0]


def whole_state(policy: Any, env: Any) -> dict[str, torch.Tensor]:
    """The policy's whole (unsharded) state dict, on every rank (under FSDP2 a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(policy, options=StateDictOptions(full_state_dict=env.enabled))


def runs_policy(engine: Any, policy: Any) -> bool:
    """The engine runs the policy module itself (case 1): it only drops what it kept of the old weights."""
    return getattr(engine, "model", None) is policy and hasattr(engine, "weights_changed")
