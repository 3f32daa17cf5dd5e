"""The embedded engine in a child process of its own (``engine: {name: embedded, process: true}``).

Why: a trainer that generates while it trains (asynchronous RL, ``max_staleness``) otherwise runs
the engine and the update on two threads of one interpreter, which take the GIL from each other at
every torch call of a small model. In a child process the engine's Python runs beside the trainer's
instead of between it; the trainer's side of a request is a pipe write and a wait that holds no lock.

How:

- The child is started with ``spawn`` (a clean interpreter: no fork of the trainer's threads; it
  imports codemoe's modules, never the user's ``__main__``, so a script without a main guard works;
  4-6 s on the 2-core development machine) and given the model with its parameters in shared memory (``share_memory()``, moved in place), so
  the two processes read one copy of the weights.
- Requests and answers cross a pipe as plain pickles (``encode`` runs here, with the same
  tokenizer): ``generate``, ``submit`` + ``collect`` (the
  agent-episode runner's path), ``health``. The child serves each on a thread of its own, so
  concurrent requests batch in its engine as they do in-process; ``abort`` ends what is in flight.
- ``update_weights`` pauses the child's engine between two of its steps, copies the new weights
  into the shared parameters from this process, and resumes it (what was kept of the old weights is
  dropped); requests in flight continue with the new weights, as in-process.
- The child exits when this process closes the pipe (it ends, or :meth:`ProcessEngine.close`); a
  child that dies fails every request in flight, and every later one, with an :class:`EngineError`
  naming its exit code.

What it does not do: stream tokens (``on_token``) or run a model sharded over ranks (FSDP2), and it
runs on CPU only (CUDA tensors would cross by IPC handles, which nothing here tests).
"""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import threading
import weakref
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any

import torch
from codemoe.core.contracts import EngineError, GenerationOutput, RequestError, SamplingParams
from codemoe.core.processes import SpawnProcess, close_child, portable_exception
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig, check_weights_fit, encode_prompt

__all__ = ["ProcessEngine"]

_READY_TIMEOUT_S = 600.0  # a cold start imports torch and transformers in the child


class ProcessEngine:
    """The :class:`~codemoe.serving.embedded.EmbeddedEngine` contract, served by a child process
    (see the module docstring). ``model`` is moved to shared memory in place and should be the
    engine's own copy (the RL stage gives it a copy when it runs asynchronously)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, config: Any, *, threads: int | None = None) -> None:
        from codemoe.core.errors import ConfigError
        from torch.distributed.fsdp import FSDPModule

        param = next(model.parameters())
        if param.device.type != "cpu":
            raise ConfigError(f"'process': the embedded engine runs in a child process on CPU only; the model is on {param.device}")
        if isinstance(model, FSDPModule):
            raise ConfigError("'process': a model sharded over ranks (FSDP2) cannot be served from a child process")
        _check_shared_memory(model)
        self.model, self.tokenizer, self.config = model.share_memory(), tokenizer, config
        self.device, self.dtype = param.device, param.dtype
        self.weights_version = 0
        self._ids = itertools.count()
        self._pending: dict[int, Future] = {}
        self._send_lock = threading.Lock()
        self._update_lock = threading.Lock()
        self._dead: str | None = None
        threads = threads or torch.get_num_threads()
        context = torch.multiprocessing.get_context("spawn")  # torch's reductions: parameters cross as shared memory
        self._conn, child_conn = context.Pipe()
        child_config = {**asdict(config), "process": False}
        self._proc = SpawnProcess(
            target=_serve,
            args=(child_conn, model, tokenizer, child_config, threads),
            name="codemoe-engine",
            daemon=True,
        )
        self._proc.start()
        child_conn.close()
        ready = self._conn.poll(_READY_TIMEOUT_S)
        try:
            kind, _, facts = pickle.loads(self._conn.recv_bytes()) if ready else ("timeout", None, None)
        except EOFError:
            kind, facts = "exit", None
        if kind != "ready":
            self._proc.join(5)
            close_child(self._conn, self._proc)
            why = facts if kind == "error" else f"exit code {self._proc.exitcode}" if kind == "exit" else "no answer"
            raise EngineError(f"the engine's child process did not start: {why}")
        self.max_context, self.eos_ids = facts["max_context"], facts["eos_ids"]
        self._reader = threading.Thread(target=self._read, name="codemoe-engine-reader", daemon=True)
        self._reader.start()
        self._finalizer = weakref.finalize(self, close_child, self._conn, self._proc)

    # ------------------------------------------------------------------------------------------
    # the engine contract
    # ------------------------------------------------------------------------------------------

    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a prompt, as the child's engine encodes it (here: no round trip)."""
        return encode_prompt(self.tokenizer, prompt, self.model.config.vocab_size)

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """As :meth:`EmbeddedEngine.generate`, computed in the child."""
        params.validate()
        return self._call("generate", list(prompts), params).result()

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        seed: int | None = None,
        prompt_index: int = 0,
        on_token: Any = None,
    ) -> Future:
        """Queue one prompt without waiting; finish with :meth:`collect`. Refused at once (as
        in-process) when the request cannot be served."""
        if on_token is not None:
            raise RequestError("the engine in a child process does not stream tokens (on_token)")
        params.validate()
        accepted: Future = self._call("submit", list(prompt_ids), params, seed, prompt_index)
        return accepted.result()  # the child answers with the id of the output to collect, or the error

    def collect(self, prompt_ids: list[int], handle: Future) -> GenerationOutput:
        """Wait for a submitted prompt and return its output."""
        return handle.result()

    def update_weights(self, state_dict: dict[str, Any] | None = None, path: str | None = None) -> None:
        """Copy new weights into the shared parameters, between two of the child's engine steps."""
        if (state_dict is None) == (path is None):
            raise RequestError("update_weights takes exactly one of state_dict or path")
        if path is not None:
            from codemoe.serving.checkpoint import load_state_dict

            state_dict = load_state_dict(path)
        own = self.model.state_dict()
        check_weights_fit(own, state_dict, whole=True)
        with self._update_lock:
            self._call("pause").result()
            try:
                with torch.no_grad():
                    for name, tensor in state_dict.items():
                        own[name].copy_(tensor)
            finally:
                self._call("resume").result()
            self.weights_version += 1

    def abort(self) -> None:
        """End every request in flight in the child (:meth:`EmbeddedEngine.abort`); returns once
        the child has ended them (their callers' answers may still be on the way)."""
        self._call("abort").result()

    def health(self) -> dict[str, Any]:
        """The child engine's status, with the child's PID."""
        return {**self._call("health").result(), "process": self._proc.pid}

    def close(self) -> None:
        """End the child (requests in flight fail); the engine cannot be used afterwards."""
        self._finalizer()

    # ------------------------------------------------------------------------------------------
    # the pipe
    # ------------------------------------------------------------------------------------------

    def _call(self, kind: str, *args: Any) -> Future:
        future: Future = Future()
        rid = next(self._ids)
        self._pending[rid] = future
        if self._dead is not None:
            self._pending.pop(rid, None)
            raise EngineError(self._dead)
        data = pickle.dumps((kind, rid, args), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            with self._send_lock:
                self._conn.send_bytes(data)
        except (OSError, ValueError) as exc:
            self._pending.pop(rid, None)
            raise EngineError(self._dead or f"the engine's child process cannot be reached: {exc}") from exc
        return future

    def _read(self) -> None:
        while True:
            try:
                kind, rid, value = pickle.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                break
            future = self._pending.pop(rid, None)
            if future is None:
                continue
            if kind == "ok":
                future.set_result(value)
            elif kind == "accepted":  # a submit: the output comes later, under the id given back
                output: Future = Future()
                self._pending[value] = output
                future.set_result(output)
            else:
                future.set_exception(value)
        self._proc.join(5)
        self._dead = f"the engine's child process exited (exit code {self._proc.exitcode})"
        for future in list(self._pending.values()):
            future.set_exception(EngineError(self._dead))
        self._pending.clear()


def _check_shared_memory(model: torch.nn.Module) -> None:
    """Refuse a model that does not fit the free shared memory (``/dev/shm``: a container's default
    is 64 MiB), naming both sizes, before anything is moved."""
    from codemoe.core.errors import ConfigError

    need = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()) if not t.is_shared())
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return  # no /dev/shm to ask (torch then uses what the platform has)
    free = stat.f_bavail * stat.f_frsize
    if need > free:
        raise ConfigError(
            f"'process': the engine's child process shares the model's {need / 2**20:.0f} MiB through /dev/shm, "
            f"which has {free / 2**20:.0f} MiB free; enlarge it (docker: --shm-size) or set process: false"
        )


# ----------------------------------------------------------------------------------------------
# the child
# ----------------------------------------------------------------------------------------------


def _serve(conn: Any, model: torch.nn.Module, tokenizer: Any, config: dict[str, Any], threads: int) -> None:
    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent ends this process
    send_lock = threading.Lock()

    def send(kind: str, rid: int | None, value: Any) -> None:
        data = pickle.dumps((kind, rid, value), protocol=pickle.HIGHEST_PROTOCOL)
        with send_lock:
            conn.send_bytes(data)

    try:
        engine = EmbeddedEngine(model, tokenizer, EmbeddedEngineConfig(**config))
    except BaseException as exc:
        send("error", None, f"{type(exc).__name__}: {exc}")
        return
    send("ready", None, {"max_context": engine.max_context, "eos_ids": sorted(engine.eos_ids), "pid": os.getpid()})
    outputs = itertools.count(-1, -1)  # ids of submitted outputs: negative, never a request's

    def answer(rid: int, fn: Any, *args: Any) -> None:
        try:
            value = fn(*args)
        except BaseException as exc:
            send("error", rid, portable_exception(exc, EngineError))
            return
        send("ok", rid, value)

    def run(rid: int, fn: Any, *args: Any) -> None:
        threading.Thread(target=answer, args=(rid, fn, *args), daemon=True).start()

    while True:
        try:
            kind, rid, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if kind == "generate":
            run(rid, engine.generate, *args)
        elif kind == "submit":
            prompt_ids, params, seed, prompt_index = args
            try:
                parts = engine.submit(prompt_ids, params, seed=seed, prompt_index=prompt_index)
            except BaseException as exc:
                send("error", rid, portable_exception(exc, EngineError))
                continue
            out = next(outputs)
            send("accepted", rid, out)
            run(out, engine.collect, prompt_ids, parts)
        elif kind == "pause":
            engine.pause()
            send("ok", rid, None)
        elif kind == "resume":
            engine.resume()
            send("ok", rid, None)
        elif kind == "health":
            answer(rid, engine.health)
        elif kind == "abort":
            answer(rid, engine.abort)
        else:
            send("error", rid, EngineError(f"unknown request {kind!r} to the engine's child process"))
