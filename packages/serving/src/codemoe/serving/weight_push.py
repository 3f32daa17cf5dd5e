"""Sending new weights to SGLang-style servers without a checkpoint on disk.

One update is a session per server, in SGLang's protocol (``sglang/srt/entrypoints/http_server.py``):
``/begin_weight_update``, then one request per bucket, then ``/end_weight_update``; the last
bucket carries the new ``weight_version``, and the engine flushes the cache afterwards
(``/flush_cache?timeout=``, which waits for running requests: an update that flushes itself is
refused by SGLang when its last requests have not retired yet). A bucket travels one of two ways:

- ``tensor``: in the request itself, ``/update_weights_from_tensor``'s
  ``serialized_named_tensors`` (base64 of a pickle of ``[(name, tensor), ...]``, one copy per
  tensor-parallel rank of the server). The tensors are moved to host memory and pickled by value
  (a plain pickle: SGLang's restricted unpickler reads it, and it works for a server on another
  machine, unlike ``torch.multiprocessing``'s shared-memory handles, which need the same host and
  the sender's authentication key);
- ``distributed``: only names, dtypes and shapes in ``/update_weights_from_distributed``, the
  tensors broadcast from this process (rank 0) over a process group the servers joined once through
  ``/init_weights_update_group``: NCCL when the weights are on a GPU, gloo otherwise (so the same
  path runs on a CPU machine against a real SGLang server). The request and the broadcast run at
  the same time: the server receives while the request is open.
"""

from __future__ import annotations

import base64
import io
import pickle
import secrets
import threading
from datetime import timedelta
from typing import Any

from codemoe.core.contracts import EngineError, RequestError
from codemoe.serving.server_process import free_port

__all__ = ["SyncGroup", "WeightSession", "serialize_bucket"]


class Refused(EngineError):
    """A server answered a weight update and did not take the weights."""


def serialize_bucket(bucket: list[tuple[str, Any]]) -> str:
    """``bucket`` as ``/update_weights_from_tensor`` takes it: base64 of a plain pickle of
    ``[(name, host tensor), ...]`` (each tensor's bytes by value)."""
    return _bucket_base64(bucket).decode("ascii")


def _bucket_base64(bucket: list[tuple[str, Any]]) -> bytes:
    buf = io.BytesIO()
    pickle.dump([(name, _owned(tensor.detach().to("cpu"))) for name, tensor in bucket], buf, protocol=4)
    return base64.b64encode(buf.getvalue())


def tensor_request(bucket: list[tuple[str, Any]], copies: int, fields: dict[str, Any]) -> bytes:
    """The JSON body of one ``/update_weights_from_tensor``, encoded once: ``copies`` of the bucket's
    base64 (one per tensor-parallel rank) spliced in as they are (base64 needs no JSON escaping)."""
    import json

    blob = _bucket_base64(bucket)
    head = json.dumps(fields)[1:-1]
    return b'{"serialized_named_tensors": [' + b", ".join([b'"' + blob + b'"'] * copies) + b"]" + (
        b", " + head.encode() if head else b"") + b"}"


def _owned(tensor: Any) -> Any:
    """``tensor`` in a storage of its own: a pickle carries a tensor's whole storage, and a view (one
    expert split from the fused experts) would carry every expert."""
    import torch

    whole = tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    if whole and tensor.storage_offset() == 0 and tensor.is_contiguous():
        return tensor
    return tensor.clone(memory_format=torch.contiguous_format)


def flat_layout(bucket: list[tuple[str, Any]]) -> list[int] | None:
    """Byte offsets of ``bucket``'s tensors laid end to end in one ``uint8`` tensor (SGLang's
    ``flattened_bucket``), or None when one would start unaligned for its dtype (then each tensor
    goes on its own)."""
    offsets, at = [], 0
    for _, tensor in bucket:
        if at % tensor.element_size():
            return None
        offsets.append(at)
        at += tensor.numel() * tensor.element_size()
    return offsets


def post_update(engine: Any, url: str, path: str, payload: dict[str, Any] | bytes, what: str = "") -> None:
    """One weight-update request; a server that does not take it (HTTP 400, ``success: false``:
    SGLang's answer to a failed update) is :class:`Refused`, naming ``what`` (default: the path)."""
    try:
        result = engine._request(url, "POST", path, payload)
    except RequestError as exc:
        raise Refused(f"the server {url} refused {what or path}: {exc}") from None
    if not isinstance(result, dict) or not result.get("success", False):
        raise Refused(f"the server {url} refused {what or path}: {result}")


class WeightSession:
    """One weight update across the engine's servers; ``errors`` holds each server that failed."""

    def __init__(self, engine: Any, version: str, group: SyncGroup | None = None) -> None:
        self.engine, self.version, self.group = engine, version, group
        self.errors: dict[str, Exception] = {}
        self._begun: list[str] = []

    def alive(self) -> list[str]:
        return [u for u in self.engine.urls if u not in self.errors]

    def _post_all(self, path: str, payload: dict[str, Any] | bytes, urls: list[str] | None = None) -> list[str]:
        urls = self.alive() if urls is None else urls
        answers = self.engine._map([(u, None) for u in urls], lambda url, _: post_update(self.engine, url, path, payload))
        for url, answer in zip(urls, answers):
            if isinstance(answer, (EngineError, RequestError)):
                self.errors.setdefault(url, answer)
        return [u for u in urls if u not in self.errors]

    def begin(self) -> bool:
        self._begun = self._post_all("/begin_weight_update", {})
        return bool(self._begun)

    def send(self, bucket: list[tuple[str, Any]], *, last: bool) -> bool:
        """One bucket to every server still in the session; False when none is left."""
        # the engine flushes the cache after the session (SGLang refuses a flush while requests run)
        fields = {"flush_cache": False, "weight_version": self.version if last else None}
        if self.group is not None:
            self._broadcast(bucket, fields)
        else:
            bodies: dict[int, bytes] = {}
            for url in self.alive():  # one copy per tensor-parallel rank of that server
                copies = self.engine._tp_size(url)
                if copies not in bodies:
                    bodies[copies] = tensor_request(bucket, copies, fields)
                self._post_all("/update_weights_from_tensor", bodies[copies], [url])
        return bool(self.alive())

    def _broadcast(self, bucket: list[tuple[str, Any]], fields: dict[str, Any]) -> None:
        group = self.group
        assert group is not None
        flat = flat_layout(bucket) is not None and len(bucket) > 1
        payload = {
            "names": [name for name, _ in bucket],
            "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in bucket],
            "shapes": [list(t.shape) for _, t in bucket],
            "group_name": group.name,
            "load_format": "flattened_bucket" if flat else None,  # one broadcast for the bucket
            **fields,
        }
        # Every member of the group receives each broadcast: with one out, nobody can be sent the rest.
        if self.errors:
            for url in self.alive():
                self.errors[url] = EngineError(f"the server {url} missed the rest of the weights: "
                                               f"the weight-update group lost {', '.join(self.errors)}")
            return
        posting = threading.Thread(target=self._post_all, args=("/update_weights_from_distributed", payload),
                                   name="codemoe-weights-post", daemon=True)
        posting.start()
        try:
            if flat:
                import torch

                group.broadcast([torch.cat([t.detach().reshape(-1).view(torch.uint8) for _, t in bucket])])
            else:
                group.broadcast([t for _, t in bucket])
        except RuntimeError as exc:  # a member went away: the group is no longer usable
            group.broken = f"broadcast failed: {exc}"
            for url in self.alive():
                self.errors.setdefault(url, EngineError(f"the server {url} did not receive the weights: {exc}"))
        posting.join()

    def end(self) -> None:
        """Close the session on every server that opened one (a server keeps its first failure)."""
        if self._begun:
            self._post_all("/end_weight_update", {}, self._begun)


class SyncGroup:
    """The process group this process (rank 0) shares with the servers' tensor-parallel ranks for
    ``weight_sync: distributed``, built like SGLang's ``init_custom_process_group`` on both sides."""

    def __init__(self, engine: Any, address: str, backend: str, timeout_s: float) -> None:
        self.name = f"codemoe-weights-{secrets.token_hex(4)}"
        self.broken = ""
        sizes = [engine._tp_size(u) for u in engine.urls]
        world = 1 + sum(sizes)
        port = free_port(address)
        errors: dict[str, Exception] = {}

        def join(url: str, offset: int) -> None:
            try:
                post_update(engine, url, "/init_weights_update_group", {
                    "master_address": address, "master_port": port, "rank_offset": offset,
                    "world_size": world, "group_name": self.name, "backend": backend,
                })
            except (EngineError, RequestError) as exc:
                errors[url] = exc

        offsets = [1 + sum(sizes[:i]) for i in range(len(sizes))]
        joins = [threading.Thread(target=join, args=(u, o), daemon=True) for u, o in zip(engine.urls, offsets)]
        formed: dict[str, Any] = {}

        def form() -> None:  # blocks until every member has connected (or the timeout)
            try:
                formed["pg"] = join_group(address, port, 0, world, self.name, backend, timeout_s)
            except (RuntimeError, ValueError) as exc:
                formed["error"] = exc

        forming = threading.Thread(target=form, name="codemoe-weights-group", daemon=True)
        forming.start()
        for thread in joins:
            thread.start()
        for thread in joins:
            thread.join()  # a server answers once it is in the group, or at once when it refuses
        if errors:  # the group cannot form: the forming thread gives up at its timeout
            raise EngineError(f"the weight-update group did not form: {'; '.join(map(str, errors.values()))}")
        forming.join()
        if "pg" not in formed:
            raise EngineError(f"the weight-update group at {address}:{port} did not form: {formed.get('error')}")
        self.pg = formed["pg"]

    def broadcast(self, tensors: list[Any]) -> None:
        import torch.distributed as dist

        handles = [dist.broadcast(t.detach().contiguous(), src=0, group=self.pg, async_op=True) for t in tensors]
        for handle in handles:
            handle.wait()

    def close(self) -> None:
        import contextlib

        import torch.distributed as dist

        with contextlib.suppress(RuntimeError, ValueError, AttributeError):  # already gone with a member
            dist.destroy_process_group(self.pg)


def join_group(address: str, port: int, rank: int, world: int, name: str, backend: str, timeout_s: float) -> Any:
    """Join (rank 0: host) the process group ``name`` at ``address:port`` the way SGLang's
    ``init_custom_process_group`` does on the servers' side (a TCP rendezvous, a store prefixed with
    the group's name, group ranks equal to ranks), so both sides meet; returns the group."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import PrefixStore, _new_process_group_helper, _world, rendezvous

    timeout = timedelta(seconds=timeout_s)
    store, _, _ = next(rendezvous(f"tcp://{address}:{port}", rank, world, timeout=timeout))
    store.set_timeout(timeout)
    pg, _ = _new_process_group_helper(world, rank, [], dist.Backend(backend), PrefixStore(name, store),
                                      group_name=name, timeout=timeout)
    _world.pg_group_ranks[pg] = {i: i for i in range(world)}
    return pg


def receive_bucket(group: Any, names: list[str], dtypes: list[str], shapes: list[list[int]], device: Any,
                   flattened: bool = False) -> list[tuple[str, Any]]:
    """The tensors rank 0 broadcasts over ``group`` for one ``/update_weights_from_distributed``
    (SGLang's receiving side: an empty tensor per name, every broadcast started, then waited for;
    ``flattened``: one ``uint8`` broadcast of them end to end, SGLang's ``flattened_bucket``)."""
    import torch
    import torch.distributed as dist

    if not (len(names) == len(dtypes) == len(shapes)):
        raise ValueError(f"{len(names)} names, {len(dtypes)} dtypes and {len(shapes)} shapes")
    out = []
    for name, dtype, shape in zip(names, dtypes, shapes):
        kind = getattr(torch, str(dtype), None)
        if not isinstance(kind, torch.dtype):
            raise ValueError(f"{name}: {dtype!r} is not a torch dtype")
        if any(not isinstance(d, int) or d < 0 for d in shape):
            raise ValueError(f"{name}: {shape!r} is not a shape")
        out.append((name, torch.empty(shape, dtype=kind, device=device)))
    if flattened:
        offsets = flat_layout(out)
        if offsets is None:
            raise ValueError("a flattened bucket whose tensors do not start aligned for their dtypes")
        flat = torch.empty(sum(t.numel() * t.element_size() for _, t in out), dtype=torch.uint8, device=device)
        dist.broadcast(flat, src=0, group=group)
        return [(name, flat[at : at + t.numel() * t.element_size()].view(t.dtype).reshape(t.shape))
                for (name, t), at in zip(out, offsets)]
    handles = [dist.broadcast(t, src=0, group=group, async_op=True) for _, t in out]
    for handle in handles:
        handle.wait()
    return out


class _BucketUnpickler(pickle.Unpickler):
    """Reads what :func:`serialize_bucket` writes and nothing else: a pickle names only the three
    globals a list of CPU tensors needs, and a tensor's storage is read with ``torch.load``'s
    ``weights_only`` loader (no code runs from the payload)."""

    def find_class(self, module: str, name: str) -> Any:
        import collections

        import torch

        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return torch._utils._rebuild_tensor_v2
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return lambda data: torch.load(io.BytesIO(data), weights_only=True)
        raise pickle.UnpicklingError(f"a weight bucket may not name {module}.{name}")


def load_bucket(blob: str | bytes) -> list[tuple[str, Any]]:
    """The ``[(name, tensor), ...]`` of one ``serialized_named_tensors`` entry (base64 or raw); a
    payload that is anything else is a :class:`ValueError` saying what."""
    import torch

    try:
        data = base64.b64decode(blob, validate=True) if isinstance(blob, str) else bytes(blob)
        value = _BucketUnpickler(io.BytesIO(data)).load()
    except (ValueError, pickle.UnpicklingError, EOFError, TypeError, AttributeError, RuntimeError) as exc:
        raise ValueError(f"not a weight bucket: {exc}") from None
    if not (isinstance(value, list) and all(
        isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], torch.Tensor)
        for item in value
    )):
        raise ValueError("not a weight bucket: expected a list of (name, tensor) pairs")
    return value
