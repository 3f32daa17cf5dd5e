"""The wire format of weight buckets: what travels is what was sent, at its own size, and a payload
that is anything but a list of tensors is refused without running any of it."""

from __future__ import annotations

import base64
import os
import pickle

import pytest
import torch
from codemoe.serving.weight_push import flat_layout, load_bucket, serialize_bucket


def test_a_bucket_comes_back_exactly_and_a_view_travels_alone():
    fused = torch.randn(8, 16, 4)  # the experts of one layer in one tensor; each expert is a view
    bucket = [(f"experts.{e}.down_proj.weight", fused[e]) for e in range(2)] + [("norm", torch.ones(4).to(torch.bfloat16))]
    blob = serialize_bucket(bucket)
    back = load_bucket(blob)
    assert [n for n, _ in back] == [n for n, _ in bucket]
    for (_, sent), (_, got) in zip(bucket, back):
        assert got.dtype == sent.dtype and torch.equal(got, sent)
    payload = sum(t.numel() * t.element_size() for _, t in bucket)  # 2 x 256 bytes + 8
    # a pickled view carries its whole storage: the fused tensor (4 KiB) would travel with each expert
    assert len(base64.b64decode(blob)) < payload + 3000, len(base64.b64decode(blob))


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch /nonexistent-codemoe-marker",))


@pytest.mark.parametrize("payload", [
    pickle.dumps([("w", _Exploit())]),  # a global the bucket format never names
    pickle.dumps({"w": torch.ones(2)}),  # tensors, but not a list of (name, tensor)
    b"not a pickle",
])
def test_anything_but_a_list_of_tensors_is_refused(payload):
    with pytest.raises(ValueError, match="not a weight bucket"):
        load_bucket(base64.b64encode(payload).decode())


def test_flat_layout_is_end_to_end_bytes_and_refuses_unaligned_starts():
    fp32, bf16 = torch.zeros(3), torch.zeros(1, dtype=torch.bfloat16)
    assert flat_layout([("a", fp32), ("b", fp32), ("c", bf16)]) == [0, 12, 24]
    assert flat_layout([("c", bf16), ("a", fp32)]) is None  # fp32 at byte 2


def test_a_request_body_encoded_once_is_the_json_of_its_fields():
    import json

    from codemoe.serving.weight_push import tensor_request

    bucket = [("w", torch.arange(6.0).reshape(2, 3))]
    body = json.loads(tensor_request(bucket, 2, {"flush_cache": False, "weight_version": "v1"}))
    assert body["flush_cache"] is False and body["weight_version"] == "v1"
    assert body["serialized_named_tensors"] == [serialize_bucket(bucket)] * 2
    assert torch.equal(load_bucket(body["serialized_named_tensors"][1])[0][1], bucket[0][1])
