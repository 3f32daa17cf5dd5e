"""DeepSeek-V3's name for the shared expert, on codemoe's MoE block."""

from __future__ import annotations

from codemoe.core.moe import MoEBlock
from codemoe.core.moe.block import SharedExpert

__all__ = ["SharedExpertsMoEBlock"]


class SharedExpertsMoEBlock(MoEBlock):
    """A :class:`MoEBlock` whose shared expert is the submodule ``shared_experts``, as
    ``transformers``' ``DeepseekV3MoE`` names it, so checkpoints keep DeepSeek-V3's parameter names.

    DeepSeek-V3 always has shared experts (ungated): the block is built with a positive
    ``shared_expert_intermediate_size`` and ``shared_expert_gate`` False.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self._modules.get("shared_expert") is None or self.shared_expert_gate is not None:
            raise ValueError("a DeepSeek-V3 MoE block has ungated shared experts (num_shared_experts >= 1)")
        self._modules["shared_experts"] = self._modules.pop("shared_expert")

    @property
    def shared_expert(self) -> SharedExpert:
        return self._modules["shared_experts"]  # type: ignore[return-value]
