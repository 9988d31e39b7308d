"""The trusted parent: runs one evaluation and produces the verdict.

This process holds the secret seeds, the expected outputs, the timeout and the verdict, and it
never imports candidate code (nor the problem's: the reference runs in a worker of its own).

    parent ──socket──▶ reference worker   builds Model, makes inputs from secret seeds,
       │                                  computes expected outputs            (trusted, no jail)
       └────socket──▶ candidate worker    imports ModelNew, runs it on copies of the inputs,
                                          reports outputs and evidence          (sandboxed)

Per trial the parent draws a seed from OS entropy, asks the reference worker for the inputs and
the expected outputs, sends only the inputs to the candidate worker, compares the outputs it gets
back, and runs the named checks on the evidence. Whatever the candidate does (raise, exit, crash,
hang, print, send garbage), the parent ends with a verdict; only a broken problem or a broken
machine raises.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import statistics
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from tritongym.errors import EvaluatorError, OptionsError, ProblemError, SolutionError
from tritongym.evaluator import checks, plausibility, profiling, trivial
from tritongym.evaluator.channel import Channel, ChannelClosed, Message, ProtocolError
from tritongym.evaluator.compare import compare_outputs
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.cgroups import Cgroup, create_cgroup
from tritongym.evaluator.families import FAMILY_TASK
from tritongym.evaluator.reference import ReferenceRunner, ReferenceTrial
from tritongym.evaluator.result import (
    EvalResult,
    KernelLaunches,
    KernelProfile,
    Notice,
    NoticeCode,
    Status,
    TimingReport,
    TrialReport,
    Violation,
    ViolationCode,
)
from tritongym.evaluator.reward import compute_reward
from tritongym.evaluator.sandbox import ResourceLimits, WorkerProcess, resolve_mode, spawn_worker
from tritongym.evaluator.static import inspect_source
from tritongym.tasks.flags import audit_flags
from tritongym.tasks.problem import Problem, normalized_source_hash


class CandidateFailed(Exception):
    """Internal: the candidate ended the evaluation early (error, crash, timeout)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _read_solution(solution: str | os.PathLike[str]) -> str:
    """A solution is a path (`Path`, or a one-line string naming an existing file) or source text."""
    if isinstance(solution, os.PathLike) or (isinstance(solution, str) and "\n" not in solution
                                             and solution.endswith(".py")):
        path = Path(solution)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise SolutionError(f"solution file not found: {path}") from exc
        except UnicodeDecodeError as exc:
            raise SolutionError(f"solution file {path} is not UTF-8 text") from exc
    if not isinstance(solution, str):
        raise SolutionError(f"solution must be source text or a path, got {type(solution).__name__}")
    return solution


def _as_problem(problem: Problem | str | os.PathLike[str]) -> Problem:
    if isinstance(problem, Problem):
        return problem
    from tritongym.tasks.loaders import load_problem_file

    return load_problem_file(problem)


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a CUDA device is visible, else ``cpu``; ``cuda`` must exist."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise OptionsError("device 'cuda' was requested but torch sees no CUDA device; use --device cpu")
    return device


@dataclass
class _Budget:
    """Wall-clock budget of the candidate: only time spent waiting on the candidate counts."""

    seconds: float
    spent: float = 0.0

    def remaining(self) -> float:
        return self.seconds - self.spent


@dataclass
class _Worker:
    """The parent's handle on one worker: process, channel, role."""

    process: WorkerProcess
    channel: Channel
    role: str
    budget: _Budget

    def request(self, kind: str, payload: Any = None) -> Message:
        """Send one request and wait for the reply within the worker's budget."""
        try:
            self.channel.send(kind, payload)
        except OSError as exc:
            raise ChannelClosed(f"could not send {kind!r}: {exc}") from exc
        return self.receive()

    def receive(self) -> Message:
        """Wait for the next message within the worker's budget (the time waited is charged)."""
        start = time.monotonic()
        try:
            return self.channel.recv(timeout=max(self.budget.remaining(), 0.001))
        finally:
            self.budget.spent += time.monotonic() - start


@dataclass
class _Evaluation:
    """State of one evaluation while it runs (the public entry point is `evaluate`)."""

    problem: Problem
    solution_source: str
    options: EvalOptions
    device: str
    sandbox: str
    violations: dict[str, Violation] = field(default_factory=dict)
    notices: list[Notice] = field(default_factory=list)
    trials: list[TrialReport] = field(default_factory=list)
    candidate_ops: dict[str, None] = field(default_factory=dict)
    reference_ops: list[str] = field(default_factory=list)
    launches: dict[tuple[str, bool], list[Any]] = field(default_factory=dict)
    timing: TimingReport | None = None
    coverage: float | None = None
    kernel_profile: list[KernelProfile] = field(default_factory=list)
    bytes_moved: int = 0
    baselines: trivial.TrivialBaselines = field(default_factory=trivial.TrivialBaselines)
    seed_source: Callable[[], int] = field(default=lambda: secrets.randbits(63))

    # -- helpers --------------------------------------------------------------------------
    def add_violation(self, violation: Violation) -> None:
        if violation.code in self.options.disabled_checks:
            notice = Notice(NoticeCode.CHECK_DISABLED, f"[{violation.code}] {violation.message}")
            if notice not in self.notices:
                self.notices.append(notice)
            return
        self.violations.setdefault(violation.code, violation)

    def _fail_from_reply(self, message: Message, phase: str) -> CandidateFailed:
        payload = message.payload if isinstance(message.payload, dict) else {}
        text = str(payload.get("message", "the candidate reported an error"))[:4000]
        kind = payload.get("kind")
        status = Status.COMPILE_ERROR if kind == "compile_error" else Status.RUNTIME_ERROR
        return CandidateFailed(status, f"{phase}: {text}")

    def _expect(self, message: Message, kind: str, phase: str) -> dict[str, Any]:
        if message.kind == "error":
            raise self._fail_from_reply(message, phase)
        if message.kind != kind or not isinstance(message.payload, dict):
            raise ProtocolError(f"expected a {kind!r} reply during {phase}, got {message.kind!r}")
        return message.payload

    # -- phases ---------------------------------------------------------------------------
    def run_trials(self, reference: ReferenceRunner, candidate: _Worker, weight_seed: int) -> None:
        init_inputs = reference.setup(weight_seed)
        phase = "import"
        try:
            self._expect(candidate.receive(), "ready", phase)
            phase = "build"
            self._expect(candidate.request("build", {"init_inputs": init_inputs,
                                                     "weight_seed": weight_seed}), "built", phase)
            plan = [FAMILY_TASK] * self.options.num_trials + list(self.options.input_families)
            want_truth = self.options.precision_policy != "off"
            for index, family in enumerate(plan):
                phase = f"trial {index} ({family})"
                trial = reference.trial(self.seed_source(), family, truth=want_truth)
                if family == FAMILY_TASK:
                    self.reference_ops = trial.compute_ops
                    self.bytes_moved = sum(t.numel() * t.element_size()
                                           for t in trivial.tensors(trial.inputs) + trivial.tensors(trial.expected))
                elif not trial.finite:
                    self.notices.append(Notice(NoticeCode.FAMILY_SKIPPED,
                                               f"input family {family!r} skipped: the reference output is not "
                                               "finite on it"))
                    continue
                nonce = secrets.token_hex(8)
                reply = self._expect(candidate.request("call", {"nonce": nonce, "inputs": trial.inputs}),
                                     "called", f"{phase} (forward)")
                if reply.get("nonce") != nonce:
                    raise ProtocolError("the reply answers another request (nonce mismatch)")
                self.record_call(index, trial, reply)
        except TimeoutError as exc:
            raise CandidateFailed(
                Status.TIMEOUT,
                f"the candidate exceeded the {self.options.timeout:g} s budget during {phase}; it and "
                "everything it started were killed",
            ) from exc
        except (ChannelClosed, ProtocolError) as exc:
            reason = candidate.process.wait_exit(grace=2.0)
            raise CandidateFailed(Status.CRASHED, f"the candidate process stopped answering during {phase} "
                                                  f"({reason}): {exc}") from exc

    def run_timing(self, reference: ReferenceRunner, candidate: _Worker) -> None:
        """Time reference and candidate in interleaved blocks; recheck secret timed outputs."""
        options = self.options
        phase = "timing warm-up"
        try:
            ref_ready = reference.request("time_start", {"warmup_ms": options.warmup_ms}, "time_ready")
            self._expect(candidate.request("time_start", {"warmup_ms": options.warmup_ms}), "time_ready", phase)
            reps = options.timing_reps
            block_sizes = [reps // options.timing_blocks + (1 if b < reps % options.timing_blocks else 0)
                           for b in range(options.timing_blocks)]
            rechecked = set(secrets.SystemRandom().sample(range(reps), min(options.timing_rechecks, reps)))
            samples: dict[str, list[float]] = {"ref": [], "ref_host": [], "ref_rt": [],
                                               "cand": [], "cand_host": [], "cand_rt": []}
            rep_index = 0
            for block, size in enumerate(block_sizes):
                phase = f"timing block {block}"
                for _ in range(size):
                    sent = time.perf_counter()
                    done = reference.request("rep", {"seed": self.seed_source()}, "rep_done")
                    samples["ref_rt"].append((time.perf_counter() - sent) * 1e3)
                    reference.request("drop", {}, "dropped")
                    samples["ref"].append(float(done["ms"]))
                    samples["ref_host"].append(float(done["host_ms"]))
                for _ in range(size):
                    seed = self.seed_source()
                    sent = time.perf_counter()
                    done = self._expect(candidate.request("rep", {"seed": seed}), "rep_done", phase)
                    samples["cand_rt"].append((time.perf_counter() - sent) * 1e3)
                    ms, host_ms = done.get("ms"), done.get("host_ms")
                    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                               for v in (ms, host_ms)):
                        self.add_violation(Violation(
                            ViolationCode.IMPLAUSIBLE_TIMING,
                            f"a timed call reported {ms!r} ms (host {host_ms!r} ms); times must be positive"))
                        return
                    samples["cand"].append(float(ms))
                    samples["cand_host"].append(float(host_ms))
                    if rep_index in rechecked:
                        kept = self._expect(candidate.request("keep", {}), "output", phase)
                        expected = reference.request("expected_for", {"seed": seed}, "expected")
                        comparison = compare_outputs(expected["expected"], kept.get("outputs"),
                                                     self.options.tolerance_for)
                        if not comparison.passed:
                            self.add_violation(Violation(
                                ViolationCode.TIMED_OUTPUT_MISMATCH,
                                f"the output of timed call {rep_index} did not match the reference "
                                f"({comparison.message}); outputs must be computed on every call"))
                    else:
                        self._expect(candidate.request("drop", {}), "dropped", phase)
                    rep_index += 1
        except TimeoutError as exc:
            raise CandidateFailed(Status.TIMEOUT, f"the candidate exceeded the {self.options.timeout:g} s "
                                                  f"budget during {phase}") from exc
        except (ChannelClosed, ProtocolError) as exc:
            reason = candidate.process.wait_exit(grace=2.0)
            raise CandidateFailed(Status.CRASHED, f"the candidate process stopped answering during {phase} "
                                                  f"({reason}): {exc}") from exc
        meaningful = self.device == "cuda"
        candidate_median = statistics.median(samples["cand"])
        estimate = plausibility.wall_clock_estimate_ms(samples["cand_rt"], samples["ref_rt"], samples["ref"])
        if not plausibility.wall_clock_consistent(samples["cand"], estimate):
            self.add_violation(Violation(
                ViolationCode.IMPLAUSIBLE_TIMING,
                f"the candidate reported a median of {candidate_median:.4g} ms per call, but the evaluator's own "
                f"clock puts it at about {estimate:.4g} ms; reported times must be real"))
        floor_ms = bandwidth = None
        if meaningful:
            bandwidth = float(reference.request("bandwidth", {}, "bandwidth")["bytes_per_s"])
            floor_ms = plausibility.physics_floor_ms(self.bytes_moved, bandwidth)
            if candidate_median < floor_ms:
                self.add_violation(Violation(
                    ViolationCode.IMPLAUSIBLE_SPEEDUP,
                    f"a median of {candidate_median:.4g} ms per call is faster than moving the task's "
                    f"{self.bytes_moved / 1e6:.3g} MB allows at this device's measured bandwidth "
                    f"({bandwidth / 1e9:.0f} GB/s, floor {floor_ms:.4g} ms)"))
        self.timing = TimingReport(
            method=str(ref_ready["method"]),
            device_name=str(ref_ready["device_name"]),
            reference_median_ms=statistics.median(samples["ref"]),
            candidate_median_ms=candidate_median,
            reference_reps=len(samples["ref"]),
            candidate_reps=len(samples["cand"]),
            reference_host_median_ms=statistics.median(samples["ref_host"]),
            candidate_host_median_ms=statistics.median(samples["cand_host"]),
            wall_clock_estimate_ms=estimate,
            floor_ms=floor_ms,
            bandwidth_gbps=None if bandwidth is None else bandwidth / 1e9,
            meaningful=meaningful,
        )

    def run_profile(self, candidate: _Worker) -> None:
        """Coverage: the share of GPU time spent in the candidate's own Triton kernels."""
        try:
            reply = self._expect(candidate.request("profile", {"calls": self.options.profile_calls}),
                                 "profiled", "profiling")
            kernels = [profiling.KernelTime(str(name), float(us), int(count)) for name, us, count in reply["kernels"]]
            mine = [str(name) for name in reply["candidate_kernels"]]
        except TimeoutError as exc:
            raise CandidateFailed(Status.TIMEOUT, f"the candidate exceeded the {self.options.timeout:g} s "
                                                  "budget during profiling") from exc
        except (ChannelClosed, ProtocolError, KeyError, TypeError, ValueError) as exc:
            reason = candidate.process.wait_exit(grace=2.0)
            raise CandidateFailed(Status.CRASHED, f"the candidate broke the profiling protocol ({reason}): "
                                                  f"{exc}") from exc
        self.coverage = profiling.coverage_from_kernels(kernels, mine)
        self.kernel_profile = [
            KernelProfile(kernel=k.name, device_us=k.device_us, count=k.count,
                          candidate=profiling.is_candidate_kernel(k.name, mine))
            for k in kernels[:20]
        ]

    def record_call(self, index: int, trial: ReferenceTrial, reply: dict[str, Any]) -> None:
        evidence = checks.CallEvidence.parse(reply.get("evidence"))
        outputs = reply.get("outputs")
        comparison = compare_outputs(trial.expected, outputs, self.options.tolerance_for)
        self.trials.append(TrialReport(
            index=index, family=trial.family, passed=comparison.passed,
            max_abs_error=comparison.max_abs_error, max_rel_error=comparison.max_rel_error,
            mismatch_fraction=comparison.mismatch_fraction, message=comparison.message,
        ))
        expected_leaves = trivial.float_leaves(trial.expected)
        if comparison.passed:
            previous = self.baselines.previous_mean(trial.family, [e.shape for e in expected_leaves])
            violation = trivial.check_beats_trivial(trial.expected, outputs, trial.inputs, previous,
                                                    self.options.trivial_margin)
            if violation is not None:
                self.add_violation(violation)
            if self.options.precision_policy != "off":
                if trial.truth is None:
                    notice = Notice(NoticeCode.PRECISION_UNCHECKED,
                                    "the reference could not be evaluated in float64; precision not checked")
                    if notice not in self.notices:
                        self.notices.append(notice)
                else:
                    violation = trivial.check_precision(trial.expected, outputs, trial.truth,
                                                        self.options.precision_factor, self.options.precision_floor)
                    if violation is not None and self.options.precision_policy == "reject":
                        self.add_violation(violation)
                    elif violation is not None:
                        notice = Notice(NoticeCode.CHECK_DISABLED, f"[{violation.code}] {violation.message}")
                        if notice not in self.notices:
                            self.notices.append(notice)
        self.baselines.add(trial.family, expected_leaves)
        for op in evidence.compute_ops:
            self.candidate_ops.setdefault(op, None)
        for launch in evidence.launches:
            self.launches.setdefault((launch.kernel, launch.candidate), []).append(launch.grid)
        for violation in checks.run_call_checks(evidence, self.reference_ops):
            self.add_violation(violation)

    def finish(self, failure: CandidateFailed | None, candidate: WorkerProcess | None, started: float) -> EvalResult:
        if failure is not None:
            status, error = failure.status, failure.message
        elif self.violations:
            status, error = Status.INTEGRITY_VIOLATION, next(iter(self.violations.values())).message
        elif any(not trial.passed for trial in self.trials):
            status = Status.INCORRECT
            failed = [t for t in self.trials if not t.passed]
            error = f"{len(failed)} of {len(self.trials)} trials failed; trial {failed[0].index}: {failed[0].message}"
        else:
            status, error = Status.OK, None
        speedup = None
        if status == Status.OK and self.timing is not None:
            speedup = self.timing.reference_median_ms / self.timing.candidate_median_ms
            if speedup > self.options.max_speedup:
                self.notices.append(Notice(NoticeCode.SPEEDUP_CLAMPED,
                                           f"measured speedup {speedup:.3g}x clamped to {self.options.max_speedup:g}x"))
                speedup = self.options.max_speedup
        result = EvalResult(
            status=status,
            violations=list(self.violations.values()),
            notices=list(self.notices),
            error=error,
            torch_compute_ops=list(self.candidate_ops),
            reference_compute_ops=list(self.reference_ops),
            speedup=speedup,
            timing=self.timing if status == Status.OK else None,
            coverage=self.coverage if status == Status.OK else None,
            kernel_profile=list(self.kernel_profile),
            trials=list(self.trials),
            triton_launches=[
                KernelLaunches(kernel=kernel, defined_in_candidate=mine, launches=len(grids), last_grid=grids[-1])
                for (kernel, mine), grids in self.launches.items()
            ],
            device=self.device,
            sandbox=self.sandbox,
            problem_id=self.problem.problem_id,
            problem_hash=self.problem.content_hash,
            solution_hash=normalized_source_hash(self.solution_source),
            duration_s=round(time.monotonic() - started, 3),
            candidate_log=candidate.log_tail() if candidate is not None else "",
        )
        result.reward = compute_reward(result, self.options.reward)
        return result


def _spawn(module: str, source: Path, *, device: str, mode: str, job_dir: Path, log: Path,
           limits: ResourceLimits, interpret: bool, role: str, budget: _Budget,
           problem_path: Path | None = None, cgroup: Cgroup | None = None) -> _Worker:
    parent_end, child_end = socket.socketpair()
    try:
        process = spawn_worker(module, str(source), device=device, mode=mode, job_dir=job_dir, log_path=log,
                               channel_fd=child_end.fileno(), token=secrets.token_hex(12), limits=limits,
                               interpret=interpret, problem_path=str(problem_path) if problem_path else None,
                               cgroup=cgroup)
    except BaseException:
        parent_end.close()
        if cgroup is not None:
            cgroup.destroy()
        raise
    finally:
        child_end.close()
    return _Worker(process=process, channel=Channel(parent_end), role=role, budget=budget)


def evaluate(
    problem: Problem | str | os.PathLike[str],
    solution: str | os.PathLike[str],
    options: EvalOptions | None = None,
    **overrides: Any,
) -> EvalResult:
    """Evaluate a candidate `ModelNew` against a KernelBench-format problem.

    Args:
        problem: a `Problem`, or the path of a problem ``.py`` file.
        solution: the candidate's source text, or a path to it (a `Path`, or a one-line string
            ending in ``.py``).
        options: an `EvalOptions`; keyword `overrides` replace its fields (``timeout=60``).

    Returns:
        The verdict. Every candidate behaviour ends in one; see `Status`.

    Raises:
        ProblemError: the problem is malformed or its reference fails on its own.
        SolutionError: the solution file cannot be read.
        OptionsError: an option is invalid (for example ``device='cuda'`` without a GPU).
        EvaluatorError: a worker process could not be started.
    """
    options = replace(options or EvalOptions(), **overrides) if overrides else (options or EvalOptions())
    started = time.monotonic()
    problem = _as_problem(problem)
    source = _read_solution(solution)
    device = resolve_device(options.device)
    report = inspect_source(source)
    evaluation = _Evaluation(problem=problem, solution_source=source, options=options, device=device,
                             sandbox="not started")
    if options.seed is not None:
        import random

        rng = random.Random(options.seed)
        evaluation.seed_source = lambda: rng.getrandbits(63)
    for finding in report.findings:
        evaluation.notices.append(Notice(NoticeCode.STATIC_FINDING, finding))
    if report.syntax_error:
        return evaluation.finish(CandidateFailed(Status.COMPILE_ERROR, report.syntax_error), None, started)
    if not report.defines_model_new:
        return evaluation.finish(CandidateFailed(
            Status.COMPILE_ERROR, "the solution does not define `class ModelNew` at module level"), None, started)
    if report.forbidden:
        shown = "; ".join(report.forbidden[:6]) + (" ..." if len(report.forbidden) > 6 else "")
        evaluation.add_violation(Violation(
            ViolationCode.FORBIDDEN_CONSTRUCT,
            f"the solution uses constructs a kernel never needs and harness attacks do ({shown}); use only "
            "torch, triton and math, and no introspection, processes, threads or monkeypatching"))
    if not report.triton_kernels:
        evaluation.add_violation(Violation(
            ViolationCode.NO_TRITON_KERNEL,
            "the solution defines no @triton.jit kernel; write the computation as Triton kernels"))
    if evaluation.violations:
        return evaluation.finish(None, None, started)

    mode = resolve_mode(options.sandbox)
    evaluation.sandbox = mode
    if mode == "none":
        evaluation.notices.append(Notice(
            NoticeCode.SANDBOX_DISABLED,
            "the candidate ran without the OS sandbox (sandbox: none): it could reach the network, the "
            "file system and other processes of this user; install bubblewrap for isolation",
        ))
    if device == "cpu" and not options.time_on_cpu:
        evaluation.notices.append(Notice(
            NoticeCode.TIMING_UNAVAILABLE,
            "timing and profiling are not done on a CPU: the Triton interpreter says nothing about GPU "
            "speed; speedup and coverage are null and the reward has no speed or coverage term (PR/PRS "
            "need a GPU)",
        ))
    elif device == "cpu":
        evaluation.notices.append(Notice(
            NoticeCode.TIMING_NOT_MEANINGFUL,
            "timed on a CPU with a host clock to exercise the timing protocol (time_on_cpu); the figures "
            "say nothing about GPU speed and the reward ignores them",
        ))
    if options.use_audit_tolerance:
        flagged = audit_flags().get(problem.content_hash)
        if flagged is not None and (flagged.atol is not None or flagged.rtol is not None):
            atol = min(x for x in (flagged.atol, options.tolerance_for(torch.float32).atol) if x is not None)
            rtol = min(x for x in (flagged.rtol, options.tolerance_for(torch.float32).rtol) if x is not None)
            options = replace(options, atol=atol, rtol=rtol)
            evaluation.options = options
            evaluation.notices.append(Notice(
                NoticeCode.AUDIT_TOLERANCE,
                f"the task audit flagged this problem ({', '.join(flagged.flags)}); using its stricter "
                f"tolerance atol={atol:g}, rtol={rtol:g}"))
    seed_for_weights = evaluation.seed_source()
    private = Path(tempfile.mkdtemp(prefix="tritongym-"))
    reference = candidate = None
    failure: CandidateFailed | None = None
    try:
        job = private / "job"
        job.mkdir()
        job.chmod(0o777)
        (job / "candidate.py").write_text(source, encoding="utf-8")
        # The candidate worker reads the problem only to make timing inputs; the reference
        # worker reads its own copy, outside the candidate's reach.
        (job / "problem.py").write_text(problem.source, encoding="utf-8")
        interpret = device == "cpu"
        memory_bytes = int(options.memory_limit_gb * (1 << 30))
        candidate_limits = ResourceLimits(memory_bytes=memory_bytes, max_processes=options.max_processes,
                                          cpu_seconds=int(options.timeout * 4 + 60))
        cgroup = create_cgroup(f"tritongym-{secrets.token_hex(8)}", options.max_processes, memory_bytes)
        if cgroup is None or set(cgroup.limits) != {"pids", "memory"}:
            have = ", ".join(sorted(cgroup.limits)) if cgroup else "none"
            evaluation.notices.append(Notice(
                NoticeCode.LIMITS_WEAKENED,
                f"no cgroup with pids and memory caps could be created here (have: {have}); the candidate's "
                "process count and memory are capped by rlimits only, which do not bind a root user's "
                "process count or a CUDA process's memory",
            ))
        candidate = _spawn("tritongym.evaluator.candidate_worker", job / "candidate.py", device=device,
                           mode=mode, job_dir=job, log=private / "candidate.log", limits=candidate_limits,
                           interpret=interpret, role="candidate", budget=_Budget(options.timeout),
                           problem_path=job / "problem.py", cgroup=cgroup)
        reference = ReferenceRunner(problem, device=device, timeout=options.reference_timeout)
        try:
            evaluation.run_trials(reference, candidate, seed_for_weights)
            passed = not evaluation.violations and all(t.passed for t in evaluation.trials)
            wants_timing = options.measure_speed and (device == "cuda" or options.time_on_cpu)
            if passed and wants_timing:
                evaluation.run_timing(reference, candidate)
            passed = not evaluation.violations and all(t.passed for t in evaluation.trials)
            if passed and device == "cuda" and options.profile_calls > 0:
                evaluation.run_profile(candidate)
        except CandidateFailed as exc:
            failure = exc
        return evaluation.finish(failure, candidate.process, started)
    finally:
        if candidate is not None:
            try:
                candidate.channel.send("exit")
            except OSError:
                pass
            candidate.process.release()
            candidate.channel.close()
        if reference is not None:
            reference.close()
        shutil.rmtree(private, ignore_errors=True)
