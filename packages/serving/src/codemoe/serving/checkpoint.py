"""Loading a policy checkpoint directory (model + tokenizer) for serving, by core's one loader
(:func:`codemoe.core.models.load_policy`); nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codemoe.core.contracts import EngineError

__all__ = ["load_checkpoint", "load_state_dict"]


def load_checkpoint(path: str | Path, *, registry: Any = None, device: str = "cpu") -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a checkpoint directory, in eval mode (see
    :func:`codemoe.core.models.load_policy`), the model on ``device`` (``auto | cpu | cuda |
    cuda:N``, :func:`codemoe.core.devices.resolve_device`); a folder that holds no checkpoint is an
    :class:`EngineError`."""
    from codemoe.core.devices import resolve_device
    from codemoe.core.models import load_policy

    target = resolve_device(device)
    try:
        model, tokenizer = load_policy(path, registry=registry)
    except (FileNotFoundError, ValueError) as exc:
        raise EngineError(str(exc)) from exc
    return model.to(target), tokenizer


def load_state_dict(path: str | Path) -> dict[str, Any]:
    """The parameters of the checkpoint in ``path``, keyed as the loaded model names them."""
    model, _ = load_checkpoint(path)
    return model.state_dict()
