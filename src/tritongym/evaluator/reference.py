"""`ReferenceRunner`: a problem's reference model in a worker process of its own.

The parent uses it for expected outputs; the task audit uses it to study problems. The problem's
code runs only in the worker, so a problem that raises, hangs or sends garbage fails there and
surfaces as `ProblemError`, never in the caller's process. A worker that dies (killed, out of
memory, its fork server gone) raises `ReferenceWorkerLost`, a `ProblemError` the execution layer
retries once on a new worker: the death may be the machine's doing, not the problem's.

Problem code from this machine (a file, a built-in, a dataset the operator loaded) is trusted and
runs unjailed. Problem code a client sent (the service's ``problem.source``, KernelGYM's
``reference_code``) is not: with ``jailed=True`` the worker gets the candidate's jail (bubblewrap,
no ``/proc``, no network, seccomp, no capabilities, rlimits), and its frames are size-bounded.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tritongym.errors import EvaluatorError, ProblemError
from tritongym.evaluator.common.channel import Channel, ChannelClosed, Message, ProtocolError
from tritongym.evaluator.common.families import FAMILY_TASK
from tritongym.evaluator.jail.cgroups import create_cgroup
from tritongym.evaluator.jail.sandbox import ResourceLimits, WorkerProcess, spawn_worker
from tritongym.tasks.problem import Problem

#: Caps of a jailed reference worker. The address-space cap is a backstop on a CPU (torch reserves
#: large ranges, and a KernelBench reference computes a float64 truth beside its float32 output);
#: the pool's reference cgroup is the real memory cap. Processes: every thread counts, and the
#: count is shared by the references of one jail.
JAILED_REFERENCE_LIMITS = ResourceLimits(memory_bytes=32 << 30, max_processes=4096, max_open_files=1024,
                                         max_file_bytes=64 << 20, job_dir_bytes=256 << 20)
#: Largest frame a jailed reference may send (a trusted one: no bound but memory). KernelBench's
#: largest inputs and outputs are a few GiB; a client's problem must not grow the server without end.
JAILED_REFERENCE_MAX_FRAME = 16 << 30


_NONE: Mapping[str, Any] = MappingProxyType({})


def _is_a(value: Any, types: type | tuple[type, ...]) -> bool:
    """isinstance, where a bool is not a number (a JSON ``true`` is no millisecond count)."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        return types is object
    return isinstance(value, types)


def check_reply_fields(problem_id: str, kind: str, expect: str, reply: dict[str, Any],
                       required: Mapping[str, type | tuple[type, ...]] = _NONE,
                       optional: Mapping[str, type | tuple[type, ...]] = _NONE) -> dict[str, Any]:
    """`reply`, if every `required` field is there and every field named has its type; else the
    problem's `ProblemError` (its code runs in the reference worker and can rewrite what it sends)."""
    for key, types in (*required.items(), *optional.items()):
        missing = key not in reply
        if (missing and key in required) or (not missing and not _is_a(reply[key], types)):
            found = "missing" if missing else type(reply[key]).__name__
            raise ProblemError(f"problem {problem_id}: the reference worker sent a malformed {expect!r} reply to "
                               f"{kind!r} (field {key!r}: {found}); a problem's code must not rewrite what its "
                               "worker sends")
    return reply


class ReferenceOverMemory(ProblemError):
    """The reference needed more memory than its cap (`memory_limit_gb`): the problem is too large for
    the limit, a `ProblemError` that names the cap and is not retried (it would fail the same way)."""


#: What an allocation that the address-space cap (`RLIMIT_AS`) refused looks like in a worker's error
#: text (Python's MemoryError; torch's CPU allocator; numpy's; C++; the OS): the process is not killed.
ALLOCATION_FAILURES = ("MemoryError", "can't allocate memory", "Unable to allocate", "std::bad_alloc",
                       "Cannot allocate memory")


def _gib_text(n: int) -> str:
    return f"{n / (1 << 30):g} GiB"


class ReferenceWorkerLost(ProblemError):
    """The reference worker died (killed, out of memory, its fork server gone) instead of answering.

    Not necessarily the problem's fault: the execution layer replaces the worker and runs the job
    once more, and reports a second loss as an `EvaluatorError`."""


@dataclass
class ReferenceTrial:
    """One trial computed by the reference: its inputs and outputs (CPU tensors)."""

    family: str
    inputs: list[Any]
    expected: Any
    compute_ops: list[str]
    finite: bool
    compute_work: tuple[int, int] = (0, 0)
    truth: Any = None
    #: elements the reference's copies wrote in a new layout, and in a new dtype (`optrace.op_moves`)
    moved_elements: tuple[int, int] = (0, 0)


class ReferenceRunner:
    """Runs `problem`'s `Model` in a dedicated, spawned worker process.

    Args:
        problem: the problem to run.
        device: ``cpu``, ``cuda`` or ``cuda:N`` (the worker is shown only that device).
        timeout: seconds each request may take before the problem is declared too slow.
        memory_limit_bytes: memory cap of the worker and everything it starts: its own cgroup where
            this machine allows one (fresh workers, and children of a trusted fork server), and an
            address-space rlimit on a CPU; None for no cap. A reference that needs more ends as
            `ReferenceOverMemory`, naming the cap.
        threads: torch's CPU threads in the worker (None: torch's default, the core count).
        spawner: starts the worker (`sandbox.spawn_worker`'s signature; default: a fresh process;
            the execution layer passes a fork server's ``start``).
        jailed: run the problem's code in the candidate's jail (client-sent problem code); the
            spawner must then jail it too (a jailed fork server's, or the default).

    Use as a context manager, or call `close()`.
    """

    def __init__(self, problem: Problem, device: str = "cpu", timeout: float = 600.0,
                 memory_limit_bytes: int | None = None, threads: int | None = None,
                 spawner: Any = None, jailed: bool = False) -> None:
        self.problem = problem
        self.device = device
        self.timeout = timeout
        self.jailed = jailed
        self._dir = Path(tempfile.mkdtemp(prefix="tritongym-ref-"))
        # The job folder holds the problem only: a jail shows all of it, read-only, at /job.
        job = self._dir / "job"
        job.mkdir()
        source = job / "problem.py"
        source.write_text(problem.source, encoding="utf-8")
        if jailed:
            limits = JAILED_REFERENCE_LIMITS
            if memory_limit_bytes is not None:
                limits = ResourceLimits(**{**limits.__dict__, "memory_bytes": memory_limit_bytes})
        else:
            limits = ResourceLimits(memory_bytes=memory_limit_bytes, max_processes=None)
        self.memory_limit_bytes = memory_limit_bytes
        # Resident memory is capped by a cgroup of the worker's own where one can be made (the
        # kernel's OOM killer then ends this worker, never a process outside it); the rlimit above
        # makes most over-cap allocations fail inside the worker first, as a clear error. A jailed
        # fork server's children cannot join a cgroup from inside the jail: that server's own
        # cgroup caps its whole tree instead (`execution.references`).
        cgroup = None
        if memory_limit_bytes is not None and (spawner is None or getattr(getattr(spawner, "__self__", None),
                                                                          "joins_job_cgroups", False)):
            cgroup = create_cgroup(f"tritongym-ref-{secrets.token_hex(8)}",
                                   limits.max_processes, memory_limit_bytes)
        self._cgroup = cgroup  # this worker's own (released with it); a shared one says nothing of it
        parent_end, child_end = socket.socketpair()
        try:
            self.process: WorkerProcess = (spawner or spawn_worker)(
                "tritongym.evaluator.worker.reference", str(source), device=device,
                mode="bwrap" if jailed else "none", job_dir=job, log_path=self._dir / "reference.log",
                channel_fd=child_end.fileno(), token=secrets.token_hex(12), limits=limits,
                interpret=device == "cpu", threads=threads, cgroup=cgroup,
            )
        except BaseException:
            parent_end.close()
            if cgroup is not None:
                cgroup.destroy()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        finally:
            child_end.close()
        # Outputs can be gigabytes (KernelBench sizes on a GPU): a trusted reference has no frame
        # bound beyond memory itself (buffers still grow only as bytes arrive); a client's is capped.
        self.channel = Channel(parent_end, max_message_bytes=JAILED_REFERENCE_MAX_FRAME if jailed else 1 << 40)
        self.seconds_spent = 0.0
        #: On a GPU, what the worker set for float32 (TF32 off), from its ``ready`` reply.
        self.fp32_note: str | None = None

    def __enter__(self) -> ReferenceRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.channel.send("exit")
        except OSError:
            pass
        self.process.release()
        self.channel.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def request(self, kind: str, payload: Any, expect: str, required: Mapping[str, type | tuple[type, ...]] = _NONE,
                optional: Mapping[str, type | tuple[type, ...]] = _NONE) -> dict[str, Any]:
        """One request/reply; the problem's own failures become `ProblemError`.

        `required` and `optional` name the reply's fields and their types: the problem's code runs
        in the reference worker and can rewrite what it sends (a client's problem is as untrusted
        as a candidate), so a reply of the right kind with a missing or mistyped field is the
        problem's fault, never a crash blamed on the candidate.
        """
        name = self.problem.problem_id
        started = time.monotonic()
        try:
            self.channel.send(kind, payload)
            message: Message = self.channel.recv(timeout=self.timeout)
        except TimeoutError as exc:
            raise ProblemError(
                f"problem {name}: the reference took longer than {self.timeout:g} s ({kind}); the task may be "
                "too large for this device: raise reference_timeout or shrink it"
            ) from exc
        except ProtocolError as exc:
            reason = self.process.wait_exit(grace=2.0)
            raise ProblemError(
                f"problem {name}: the reference worker sent a malformed reply during {kind} ({reason}): {exc}\n"
                f"{self.process.log_tail(2000)}"
            ) from exc
        except (ChannelClosed, OSError) as exc:
            reason = self.process.wait_exit(grace=2.0)
            log = self.process.log_tail(2000)
            how = self._over_memory(log)
            if how is not None:
                raise ReferenceOverMemory(self._over_memory_message(kind, f"{how}; the worker {reason}", log)) from exc
            raise ReferenceWorkerLost(
                f"problem {name}: the reference worker died during {kind} ({reason}): {exc}\n{log}"
            ) from exc
        finally:
            self.seconds_spent += time.monotonic() - started
        if message.kind == "error":
            detail = message.payload.get("message") if isinstance(message.payload, dict) else message.payload
            how = self._over_memory(str(detail))
            if how is not None:
                raise ReferenceOverMemory(self._over_memory_message(kind, how, str(detail)))
            raise ProblemError(f"problem {name}: the reference failed during {kind}:\n{detail}")
        if message.kind == "device_error":
            detail = message.payload.get("message") if isinstance(message.payload, dict) else message.payload
            raise EvaluatorError(f"the GPU failed in the reference worker before the problem was loaded: {detail}")
        if message.kind != expect or not isinstance(message.payload, dict):
            raise EvaluatorError(f"reference worker answered {message.kind!r} to {kind!r}")
        return check_reply_fields(name, kind, expect, message.payload, required, optional)

    def _over_memory(self, text: str) -> str | None:
        """How a failure is the memory cap's doing, None when it is not: the worker's cgroup reached
        the cap (failed charges or an OOM kill inside it), or an allocation failed under the
        address-space cap."""
        if self.memory_limit_bytes is None:
            return None
        if self._cgroup is not None and self._cgroup.memory_exceeded():
            return "its processes reached the cap and the kernel refused or killed within them"
        if any(marker in text for marker in ALLOCATION_FAILURES):
            return "an allocation failed at the cap"
        return None

    def _over_memory_message(self, kind: str, how: str, detail: str) -> str:
        cap = _gib_text(self.memory_limit_bytes or 0)
        return (f"problem {self.problem.problem_id}: the reference needed more than its memory limit of {cap} "
                f"during {kind} ({how}); the problem is too large for this limit: run it at CPU size "
                f"(--size cpu), raise the limit (memory_limit_gb, --memory-limit-gb) if this machine has the "
                f"memory, or evaluate it on a GPU\n{detail}")

    def setup(self, weight_seed: int) -> Any:
        """Build `Model` under `weight_seed`; returns ``get_init_inputs()`` (drawn under the same seed)."""
        ready = self.request("setup", {"weight_seed": weight_seed}, "ready", required={"init_inputs": (list, tuple)},
                             optional={"fp32": (str, type(None))})
        note = ready.get("fp32")
        self.fp32_note = note if isinstance(note, str) else None
        return ready["init_inputs"]

    def trial(self, seed: int, family: str = FAMILY_TASK, truth: bool = False) -> ReferenceTrial:
        """Inputs from `seed` (perturbed by `family`) and the reference's outputs on them."""
        reply = self.request("trial", {"seed": seed, "family": family, "truth": truth}, "trial",
                             required={"inputs": list, "expected": object, "compute_ops": list, "finite": bool},
                             optional={"compute_work": (list, tuple), "moved_elements": (list, tuple)})
        work = reply.get("compute_work", (0, 0))
        moved = reply.get("moved_elements", (0, 0))
        if len(work) != 2 or not all(_is_a(v, int) for v in work) or len(moved) != 2 or \
                not all(_is_a(v, int) for v in moved) or \
                not all(isinstance(op, str) for op in reply["compute_ops"]):
            raise ProblemError(f"problem {self.problem.problem_id}: the reference worker sent a malformed 'trial' "
                               "reply (compute_ops must be op names, compute_work and moved_elements two integers "
                               "each)")
        return ReferenceTrial(family=family, inputs=reply["inputs"], expected=reply["expected"],
                              compute_ops=list(reply["compute_ops"]), finite=reply["finite"],
                              compute_work=(int(work[0]), int(work[1])), truth=reply.get("truth"),
                              moved_elements=(int(moved[0]), int(moved[1])))
