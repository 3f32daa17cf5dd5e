"""Equality of two float32 computations, up to the rounding they can really accumulate."""

from __future__ import annotations

import torch


def close(got: torch.Tensor, want: torch.Tensor, msg: str | None = None) -> None:
    """Equal up to float32 rounding. A float sum rounds relative to its terms, not to its result:
    where terms cancel (a gradient summed over tokens, a dot product) an entry is off by ulps of
    the tensor's scale, not of its own value. The two computations differ by up to ~4e-7 of the
    largest entry, which took 0.6 of a per-entry atol of 1e-6 on AVX-512; so the slack is 1e-5 of
    the largest entry (~100 ulps), besides the usual rtol."""
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.detach().abs().max()), msg=msg)
