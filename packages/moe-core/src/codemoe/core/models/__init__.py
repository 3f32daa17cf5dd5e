"""Models: ``transformers`` causal LMs with codemoe MoE blocks, built from model presets (shipped in ``codemoe/core/presets/models``).

- :func:`build_model` — a model from a preset name or spec;
- :func:`save_pretrained` / :func:`load_pretrained` — Hugging Face checkpoints (tokenizer included);
  :func:`load_policy` — any checkpoint folder a policy is served or evaluated from, in eval mode;
  :func:`is_standard` says whether plain ``transformers`` / SGLang compute the same model;
- :func:`from_transformers` — codemoe blocks into a plain ``transformers`` Qwen3-MoE;
- :func:`upcycle` — a dense ``transformers`` Qwen3 turned into an MoE;
- :func:`count_parameters` — total / active / embedding / expert / dense parameters on the meta device.
"""

from codemoe.core.models.accounting import ParameterCount, count_parameters
from codemoe.core.models.build import build_model, default_registry, resolve_spec
from codemoe.core.models.checkpoint import is_standard, load_policy, load_pretrained, save_pretrained
from codemoe.core.models.convert import config_from_transformers, from_transformers
from codemoe.core.models.presets import list_presets, load_preset
from codemoe.core.models.upcycle import UpcycleConfig, upcycle

__all__ = [
    "ParameterCount",
    "UpcycleConfig",
    "build_model",
    "config_from_transformers",
    "count_parameters",
    "default_registry",
    "from_transformers",
    "is_standard",
    "list_presets",
    "load_policy",
    "load_preset",
    "load_pretrained",
    "resolve_spec",
    "save_pretrained",
    "upcycle",
]
