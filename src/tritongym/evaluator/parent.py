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

import hashlib
import math
import os
import random
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from tritongym.errors import EvaluatorError, OptionsError, SolutionError, TritongymError
from tritongym.evaluator import checks, measurement, replays, trivial
from tritongym.evaluator.common.channel import MAX_EXTERNAL_BYTES, Channel, ChannelClosed, Message, ProtocolError
from tritongym.evaluator.common.families import FAMILY_TASK
from tritongym.evaluator.compare import Comparison, compare_outputs, identical_outputs, shared_float64
from tritongym.evaluator.interpreter_gaps import interpreter_gaps
from tritongym.evaluator.jail.cgroups import Cgroup, create_cgroup
from tritongym.evaluator.jail.sandbox import ResourceLimits, WorkerProcess, resolve_mode, spawn_worker
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.reference import ALLOCATION_FAILURES, ReferenceRunner, ReferenceTrial
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
from tritongym.evaluator.session import Budget, CandidateFailed, WorkerHandle
from tritongym.evaluator.static import StaticReport, inspect_source
from tritongym.tasks.flags import audit_flags
from tritongym.tasks.problem import Problem, normalized_source_hash


def _read_solution(solution: str | os.PathLike[str]) -> str:
    """A solution is source text (a `str`, always) or the path of a file (`os.PathLike`).

    One rule for `evaluate`, `evaluate_many`, the pool and the service: text from an untrusted
    producer (a model's reply) that happens to be one line ending in ``.py`` must never make the
    evaluator read a file of this machine. Such a text gets a verdict that says how to pass a file
    (`_looks_like_a_file_name`).
    """
    if isinstance(solution, os.PathLike):
        path = Path(solution)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise SolutionError(f"solution file not found: {path}") from exc
        except UnicodeDecodeError as exc:
            raise SolutionError(f"solution file {path} is not UTF-8 text") from exc
    if not isinstance(solution, str):
        raise SolutionError(f"solution must be source text (str) or a path (os.PathLike), got "
                            f"{type(solution).__name__}")
    return solution


def _looks_like_a_file_name(source: str) -> bool:
    """One short line ending in ``.py``: a file name passed as a `str` (the old form), not source."""
    text = source.strip()
    return bool(text) and "\n" not in text and len(text) < 4096 and text.endswith(".py")


def _as_problem(problem: Problem | str | os.PathLike[str]) -> Problem:
    if isinstance(problem, Problem):
        return problem
    from tritongym.tasks.loaders import load_problem_file

    return load_problem_file(problem)


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a CUDA device is visible, else ``cpu``; ``cuda``/``cuda:N`` must exist."""
    from tritongym.evaluator.common.device import parse_device

    kind, index = parse_device(device)
    if kind == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise OptionsError(f"device {device!r} was requested but torch sees no CUDA device; use --device cpu")
    if index is not None and index >= torch.cuda.device_count():
        raise OptionsError(f"device {device!r} was requested but torch sees {torch.cuda.device_count()} CUDA "
                           "device(s)")
    return device


#: Most trials added so that every autotune config runs on a perturbed input family (and again,
#: so that every trial has a peer that ran the same configs).
MAX_AUTOTUNE_EXTRA_TRIALS = 16


@dataclass
class OutputReview:
    """What the checks of one trial's outputs found (`_Evaluation.review_outputs`)."""

    comparison: Comparison
    violations: list[Violation] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


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
    kernels_found: bool = True
    #: autotuned kernel -> (config positions the trials ran, number of configs)
    autotune_checked: dict[str, tuple[set[int], int]] = field(default_factory=dict)
    #: wall-clock seconds per phase (`EvalResult.phase_seconds`)
    phases: dict[str, float] = field(default_factory=dict)
    #: the answered trials with their launch logs, until the clean room has replayed
    records: list[replays.TrialRecord] = field(default_factory=list)
    #: the model's state as the candidate built it (storages as bytes), for the clean room
    state: list[Any] = field(default_factory=list)
    #: the clean room's timed replays of one task trial's log (ms per call), when timing is wanted
    replay_ms: list[float] = field(default_factory=list)
    #: the clean room's profile of replays of that trial (kernels, candidate names, launch counts), on a GPU
    room_profile: tuple[list[Any], list[str], dict[str, int] | None] | None = None

    # -- helpers --------------------------------------------------------------------------
    def passing(self) -> bool:
        """No violation so far and every trial matched (the gate for timing and profiling)."""
        return not self.violations and all(trial.passed for trial in self.trials)

    def add_violation(self, violation: Violation) -> None:
        if violation.code in self.options.disabled_checks:
            notice = Notice(NoticeCode.CHECK_DISABLED, f"[{violation.code}] {violation.message}")
            if notice not in self.notices:
                self.notices.append(notice)
            return
        self.violations.setdefault(violation.code, violation)

    def _fail_from_reply(self, message: Message, phase: str) -> CandidateFailed:
        payload = message.payload if isinstance(message.payload, dict) else {}
        text = payload.get("message")
        text = text[:4000] if isinstance(text, str) else "the candidate reported an error"
        refused_field = payload.get("refused")
        refused = [item[:200] for item in (refused_field if isinstance(refused_field, list) else [])
                   if isinstance(item, str)][:6]
        if refused:
            # The error came from (or followed) an operation the run-time policy refused.
            violation = Violation(ViolationCode.FORBIDDEN_CONSTRUCT,
                                  f"the candidate attempted operations refused at run time: {'; '.join(refused)}")
            if violation.code not in self.options.disabled_checks:
                self.add_violation(violation)
                return CandidateFailed(Status.INTEGRITY_VIOLATION, f"{phase}: {violation.message}\n{text}")
        kind = payload.get("kind")
        if kind == "device_error" and phase == "import":
            # The worker could not use the device before any candidate code ran: the machine's
            # fault (driver, jail), never the candidate's.
            raise EvaluatorError(f"the candidate worker cannot use the device: {text}")
        if kind == "unsupported" and not interpreter_gaps(self.solution_source):
            # The candidate's process says "not supported in interpreter mode", but its kernels use
            # no construct the interpreter lacks: an exception text is not evidence.
            return CandidateFailed(Status.RUNTIME_ERROR, f"{phase}: {text}")
        if kind == "unsupported":
            self.note_interpreter_limit(", ".join(dict.fromkeys(interpreter_gaps(self.solution_source))))
            return CandidateFailed(Status.UNSUPPORTED, f"{phase}: {text}")
        status = Status.COMPILE_ERROR if kind == "compile_error" else Status.RUNTIME_ERROR
        if status == Status.RUNTIME_ERROR and any(marker in text for marker in ALLOCATION_FAILURES) and (
                "CUDA out of memory" not in text):
            # Under the address-space cap an allocation fails with the allocator's own words, which
            # never say that a cap exists (the cgroup's kill is named by the worker's exit instead).
            # torch.OutOfMemoryError is the device's memory, which memory_limit_gb does not cap.
            text += (f"\n(an allocation failed: every process of this evaluation has a memory limit of "
                     f"{self.options.memory_limit_gb:g} GiB (memory_limit_gb); allocate less, e.g. reuse "
                     "buffers, write into the output or work in blocks)")
        return CandidateFailed(status, f"{phase}: {text}")

    def note_interpreter_limit(self, detail: str) -> None:
        """The `interpreter_limit` notice that goes with an `unsupported` status (once)."""
        notice = Notice(NoticeCode.INTERPRETER_LIMIT,
                        f"the CPU interpreter cannot run a construct this candidate uses ({detail}); this is a limit "
                        "of the CPU tier, not a verdict on the kernel's correctness: evaluate it on a GPU")
        if notice not in self.notices:
            self.notices.append(notice)

    def expect(self, message: Message, kind: str, phase: str) -> dict[str, Any]:
        if message.kind == "error":
            raise self._fail_from_reply(message, phase)
        if message.kind != kind or not isinstance(message.payload, dict):
            raise ProtocolError(f"expected a {kind!r} reply during {phase}, got {message.kind!r}")
        return message.payload

    # -- phases ---------------------------------------------------------------------------
    def run_trials(self, reference: ReferenceRunner, candidate: WorkerHandle, weight_seed: int) -> None:
        init_inputs = reference.setup(weight_seed)
        phase = "import"
        clock = time.monotonic()
        try:
            ready = self.expect(candidate.receive(), "ready", phase)
            self.note_kernels(ready)
            self.phases["import"], clock = time.monotonic() - clock, time.monotonic()
            phase = "build"
            # The built reply carries the model's state (bounded by the candidate's memory cap).
            candidate.channel.max_message_bytes = max(candidate.channel.max_message_bytes,
                                                      int(self.options.memory_limit_gb * (1 << 30)))
            built = self.expect(candidate.request("build", {"init_inputs": init_inputs,
                                                             "weight_seed": weight_seed}), "built", phase)
            self.note_tampering(built.get("tampered", []), "while building the model")
            state = built.get("state", [])
            if not isinstance(state, list) or not all(isinstance(t, torch.Tensor) for t in state):
                raise ProtocolError("malformed model state in the built reply")
            self.state = state
            self.phases["build"], clock = time.monotonic() - clock, time.monotonic()
            plan = [FAMILY_TASK] * self.options.num_trials + list(self.options.input_families)
            want_truth = self.options.precision_policy != "off"
            for index, family in enumerate(plan):
                phase = f"trial {index} ({family})"
                self._run_trial(reference, candidate, index, family, want_truth, phase)
            # Every autotune config the trials ran must also run on a perturbed family: a config
            # that is right only on the task's distribution is otherwise never really checked.
            index = len(plan)
            for extra in range(MAX_AUTOTUNE_EXTRA_TRIALS if self.options.input_families else 0):
                missing = self.configs_without_a_family()
                if not missing or not self.passing():
                    break
                _kernel, position, count = missing[0]
                index += (position - index) % count
                family = self.options.input_families[extra % len(self.options.input_families)]
                phase = f"trial {index} ({family}, autotune config {position + 1} of {count})"
                self._run_trial(reference, candidate, index, family, want_truth, phase)
                index += 1
            # Every trial that ran autotune configs needs a peer that ran the same ones: host data
            # is found by comparing logs, and a config changes grids and block sizes legitimately,
            # so a trial without a peer could carry host data in them unseen (`replays.host_origin`).
            # Config positions follow the trial index, so index + lcm(config counts) repeats them.
            for _extra in range(MAX_AUTOTUNE_EXTRA_TRIALS):
                lonely = self.records_without_a_peer()
                if not lonely or not self.passing():
                    break
                record = lonely[0]
                cycle = math.lcm(*(self.autotune_checked[kernel][1] for kernel, _position in record.configs
                                   if kernel in self.autotune_checked))
                used = {r.index for r in self.records}
                index = record.index + cycle
                while index in used:
                    index += cycle
                phase = f"trial {index} ({record.family}, the same autotune configs as trial {record.index})"
                self._run_trial(reference, candidate, index, record.family, want_truth, phase)
            self.phases["trials"] = time.monotonic() - clock
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

    def run_clean_room(self, start_room: Callable[[], WorkerHandle], reference: ReferenceRunner | None = None,
                       time_reps: int = 0, profile_calls: int = 0) -> None:
        """Re-execute chosen trials' launch logs where no candidate code ever ran; decide on that.

        Called once the candidate answered every trial and passed the candidate-side filters
        (which are cheap early exits, never a reason for reward). See `cleanroom`. The acceptance
        rule is one property: **the outputs follow from the logged kernels and ops acting on the
        clean room's own inputs**. Chosen trials are replayed on their own inputs; a log that
        varies between trials (`replays.host_information`), or has no peer to compare with, is
        also replayed on fresh inputs of the same shapes that the candidate never saw (drawn from
        `reference`), and must give *their* answer there (`_counterfactual`). With `time_reps`,
        the room then times `time_reps` replays of one chosen task trial (`replay_ms`;
        `measurement.charged_candidate_ms`); with `profile_calls` (a GPU), it profiles that many
        replays of it for the coverage (`room_profile`; `measurement.run_profile`).
        """
        for record in self.records:
            error = replays.log_error(record.log)
            if error is not None:
                self.add_violation(Violation(
                    ViolationCode.UNREPLAYABLE,
                    f"trial {record.index}: the forward cannot be re-executed from its launch log ({error}). "
                    "Verdicts come from replaying each forward's Triton launches and PyTorch ops in a process "
                    "that never runs the solution's Python; launch kernels defined in the solution on tensors, "
                    "numbers, strings and dtypes"))
                return
        logs = [record.log for record in self.records]
        combos = self.config_combos()
        information = []
        for position in range(len(self.records)):
            peers = [i for i, combo in enumerate(combos) if combo == combos[position]]
            information.append(replays.host_information(logs, position,
                                                        same_configs=peers if len(peers) > 1 else None))
        chosen = sorted(set(replays.choose_replays(self.records)))
        # A chosen log that varies between trials (or cannot be compared) must compute fresh inputs'
        # answer too; any other log carrying more than its budget must as well, replayed or not. So
        # must a chosen log that ran autotune configs: a config wrong on part of the input space runs
        # on a few trials only, and fresh inputs are one more draw of that space it cannot foresee.
        counterfactual = sorted({i for i in chosen if information[i].bits > 0 or information[i].peers == 0
                                 or self.records[i].configs}
                                | {i for i, record in enumerate(self.records)
                                   if information[i].bits > replays.value_budget_bits(record.expected)})
        room = start_room()
        phase = "start"
        try:
            self._expect_room(room.receive(), "ready")
            phase = "state"
            self._expect_room(room.request("state", {"tensors": self.state}), "state_set")
            for position in chosen:
                record = self.records[position]
                phase = f"trial {record.index}"
                room.allow_reply_bytes(trivial.tensors(record.expected))
                reply = room.request("replay", {"inputs": record.inputs, "log": record.log})
                if reply.kind == "error":
                    self._room_error(record, reply.payload)
                    return
                payload = self._expect_room(reply, "replayed")
                if not self._judge_replay(record, payload):
                    return
            for position in counterfactual:
                record = self.records[position]
                phase = f"trial {record.index} on fresh inputs"
                if not self._counterfactual(room, reference, record, information[position]):
                    return
            measured = self._measured_trial(chosen) if time_reps > 0 or profile_calls > 0 else None
            if time_reps > 0 and measured is not None:
                phase = "timing"
                self._time_replays(room, measured, time_reps)
            if profile_calls > 0 and measured is not None and self.passing():
                phase = "profiling"
                self._profile_replays(room, measured, profile_calls)
        except TimeoutError as exc:
            raise CandidateFailed(Status.TIMEOUT, f"re-executing the forward's launch log in the clean room exceeded "
                                  f"the {self.options.timeout:g} s budget ({phase})") from exc
        except (ChannelClosed, ProtocolError) as exc:
            reason = room.process.wait_exit(grace=2.0)
            raise CandidateFailed(Status.CRASHED, f"the clean room stopped while re-executing the forward's launch "
                                  f"log ({phase}: {reason}): {exc}") from exc
        finally:
            try:
                room.channel.send("exit")
            except OSError:
                pass
            room.process.release()
            room.channel.close()

    def _fresh_trial(self, reference: ReferenceRunner | None, record: replays.TrialRecord) -> ReferenceTrial | None:
        """Inputs the candidate never saw, of `record`'s family and shapes, with the reference's answer."""
        if reference is None:
            return None
        shapes = [(tuple(t.shape), t.dtype) for t in trivial.tensors(record.inputs)]
        for _attempt in range(3):  # a task whose get_inputs draws its shapes may need a few draws
            trial = reference.trial(self.seed_source(), record.family, truth=record.truth is not None)
            if [(tuple(t.shape), t.dtype) for t in trivial.tensors(trial.inputs)] == shapes and trial.finite:
                return trial
        return None

    def _counterfactual(self, room: WorkerHandle, reference: ReferenceRunner | None, record: replays.TrialRecord,
                        carried: replays.HostInformation) -> bool:
        """`record`'s log replayed on fresh inputs must give the reference's answer on *them*.

        Host values that are functions of shapes, configs or buffers kept across calls survive a
        change of the inputs' values; values derived from this trial's inputs (an answer computed in
        torch and carried as scalars, grid sizes, constexprs, strides, module constants or shipped
        bytes) do not. A log that fails it is value-dependent: honest code may be (jagged offsets, a
        count read with ``.item()``), so it passes only when what varies between trials is too little
        to hold the answer (`replays.value_budget_bits`).
        """
        trial = self._fresh_trial(reference, record)
        why = "no fresh inputs of the same shapes could be drawn"
        if trial is not None:
            room.allow_reply_bytes(trivial.tensors(trial.expected))
            reply = room.request("replay", {"inputs": trial.inputs, "log": record.log})
            if reply.kind == "error":
                payload = reply.payload if isinstance(reply.payload, dict) else {}
                why = f"it does not re-execute on them: {str(payload.get('message'))[:300]}"
            else:
                outputs = self._expect_room(reply, "replayed").get("outputs")
                with shared_float64():
                    review = self.review_outputs(trial, outputs, record.previous_mean)
                failing = [v for v in review.violations if v.code not in self.options.disabled_checks]
                if review.comparison.passed and not failing:
                    return True
                why = review.comparison.message if not review.comparison.passed else failing[0].message
        budget = replays.value_budget_bits(record.expected)
        if carried.peers > 0 and 0 < carried.bits <= budget:
            return True  # value-dependent launch data, too little to hold the answer
        if carried.peers > 0 and carried.bits == 0:
            # The same log in every trial, wrong on inputs it never saw (an autotune config wrong on
            # part of the input space): a wrong program, not host data.
            self.trials.append(TrialReport(
                index=record.index, family=record.family, passed=False, max_abs_error=None, max_rel_error=None,
                mismatch_fraction=None, message=f"the logged launches replayed in the clean room on fresh inputs of "
                f"this trial's family ({record.family}) and shapes: {why[:400]}"))
            return False
        shown = "; ".join(carried.examples) or "nothing to compare it with"
        self.add_violation(Violation(
            ViolationCode.HOST_COMPUTE,
            f"trial {record.index}: the forward's launch log, replayed on fresh inputs of the same shapes, does not "
            f"compute their answer ({why[:300]}), and what it carries from the host differs between trials "
            f"({carried.bits} bits: {shown}), more than this output's budget of {budget} bits: the answer rode in "
            "the log as host data. Compute from this call's inputs on the device, in the solution's kernels"))
        return False

    def _measured_trial(self, chosen: list[int]) -> replays.TrialRecord:
        """The replayed trial the clean room times and profiles: a task trial, picked in secret."""
        task = [i for i in chosen if self.records[i].family == FAMILY_TASK] or chosen
        return self.records[secrets.SystemRandom().choice(task)]

    def _profile_replays(self, room: WorkerHandle, record: replays.TrialRecord, calls: int) -> None:
        """Device time per kernel over `calls` replays of `record` (GPU): the coverage's evidence."""
        with measurement.gpu_lock(self):
            reply = room.request("profile", {"inputs": record.inputs, "log": record.log, "calls": calls})
        if reply.kind == "error":
            self._room_error(record, reply.payload)
            return
        try:
            self.room_profile = measurement.parse_profile_reply(self._expect_room(reply, "profiled"))
        except ValueError as exc:
            raise ProtocolError(f"malformed profile from the clean room: {exc}") from exc

    def _time_replays(self, room: WorkerHandle, record: replays.TrialRecord, reps: int) -> None:
        """Time `reps` replays of `record` (a task trial picked in secret) in the clean room."""
        with measurement.gpu_lock(self):  # on a GPU, timed alone as every timing phase is
            reply = room.request("time", {"inputs": record.inputs, "log": record.log, "reps": reps,
                                          "warmup_ms": self.options.warmup_ms})
        if reply.kind == "error":
            self._room_error(record, reply.payload)
            return
        payload = self._expect_room(reply, "timed")
        times = payload.get("ms")
        if not (isinstance(times, list) and len(times) == reps and all(
                type(t) in (int, float) and math.isfinite(t) and t > 0 for t in times)):
            raise ProtocolError("malformed timing report from the clean room")
        self.replay_ms = [float(t) for t in times]

    def _expect_room(self, message: Message, kind: str) -> dict[str, Any]:
        if message.kind == "error" and isinstance(message.payload, dict):
            raise EvaluatorError(f"the clean room failed: {str(message.payload.get('message'))[:500]}")
        if message.kind != kind:
            raise ProtocolError(f"expected a {kind!r} reply from the clean room, got {message.kind!r}")
        if not isinstance(message.payload, dict):
            raise ProtocolError(f"a malformed {kind!r} reply from the clean room (not a mapping)")
        return message.payload

    def _room_error(self, record: replays.TrialRecord, payload: Any) -> None:
        payload = payload if isinstance(payload, dict) else {}
        kind, text = payload.get("kind"), str(payload.get("message"))[:1500]
        if kind == "unsupported":  # measured by the clean room's own interpreter: believed
            self.note_interpreter_limit("measured in the clean room")
            raise CandidateFailed(Status.UNSUPPORTED, f"trial {record.index} (clean room): {text}")
        if kind == "out_of_bounds":  # measured on the clean room's own buffers: see `cleanroom.bounds`
            raise CandidateFailed(Status.RUNTIME_ERROR, f"trial {record.index} (clean room): {text}")
        if kind == "refused":
            self.add_violation(Violation(ViolationCode.PYTHON_IN_KERNEL,
                                         f"the clean room rebuilds each kernel from the solution's text with Triton "
                                         f"only, and refused one: {text}"))
            return
        self.add_violation(Violation(ViolationCode.EVIDENCE_MISMATCH,
                                     f"trial {record.index}: the forward's launch log does not re-execute as logged "
                                     f"in the clean room ({text}); the outputs must come from the logged kernel "
                                     "launches and PyTorch ops alone"))

    def _judge_replay(self, record: replays.TrialRecord, payload: dict[str, Any]) -> bool:
        """The clean room's outputs under every check the candidate's outputs got, and the PyTorch
        work it executed. The candidate's outputs are only a filter: it can compute them with
        torch and hide that from its log, so being better than a trivial output or float32-accurate
        must hold for what the logged work gives (`harness_clean_forged_accuracy_*.py`)."""
        outputs = payload.get("outputs")
        if record.candidate_review is not None and identical_outputs(record.candidate_outputs, outputs):
            # The same bytes as the candidate's outputs for this trial: the checks read nothing else
            # (the record's inputs, expected, truth and baseline are the ones they were reviewed with),
            # so the review is the one already made, without computing it again.
            review = record.candidate_review
        else:
            trial = ReferenceTrial(family=record.family, inputs=record.inputs, expected=record.expected,
                                   compute_ops=[], finite=True, truth=record.truth)
            with shared_float64():
                review = self.review_outputs(trial, outputs, record.previous_mean)
        comparison = review.comparison
        if not comparison.passed:
            self.add_violation(Violation(
                ViolationCode.EVIDENCE_MISMATCH,
                f"trial {record.index}: re-executing the forward's logged kernel launches and PyTorch ops in the "
                f"clean room, on the same inputs, does not give the reference's outputs ({comparison.message}), "
                "although the candidate's own outputs did: they came from work the log does not show (a thread, "
                "a callable Triton runs, raw memory, an output object computing late)"))
            return False
        if review.violations:
            for violation in review.violations:
                self.add_violation(replace(violation, message=f"trial {record.index}, measured on the clean room's "
                                                                f"re-execution of the launch log: {violation.message}"))
            if any(v.code not in self.options.disabled_checks for v in review.violations):
                return False
        self.apply_review(replace(review, violations=[]))
        work = payload.get("work")
        ops = payload.get("compute_ops")
        moved = payload.get("moved")
        if not (isinstance(work, list) and len(work) == 2 and all(type(v) is int and v >= 0 for v in work)
                and isinstance(moved, list) and len(moved) == 2 and all(type(v) is int and v >= 0 for v in moved)
                and isinstance(ops, list) and all(isinstance(o, str) for o in ops)):
            raise ProtocolError("malformed replay report")
        from tritongym.evaluator.oprules import covers_reference, heavy_share

        raw = payload.get("raw_compute", [])
        if not (isinstance(raw, list) and all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                                              and type(r[1]) is int for r in raw)):
            raise ProtocolError("malformed replay report")
        if raw:
            shown = ", ".join(f"{op} reading {elements} elements" for op, elements in raw[:4])
            self.add_violation(Violation(
                ViolationCode.PYTORCH_FALLBACK,
                f"trial {record.index}, measured in the clean room: PyTorch computed on the inputs' (or the model "
                f"state's) floating-point values before any kernel wrote them ({shown}). Views, copies, "
                "allocations and work on integer metadata are glue; arithmetic on the problem's data is its work: "
                "write it in the solution's Triton kernels"))
            return False
        why = heavy_share((work[0], work[1]), record.compute_work, (moved[0], moved[1]), record.moved_elements)
        if why is None and covers_reference(ops, self.reference_ops):
            why = f"the logged PyTorch ops include every compute op of the reference ({', '.join(ops[:6])})"
        if why is not None:
            self.add_violation(Violation(ViolationCode.PYTORCH_FALLBACK,
                                         f"trial {record.index}, measured in the clean room: {why}; write the "
                                         "computation as Triton kernels"))
            return False
        return True

    def _run_trial(self, reference: ReferenceRunner, candidate: WorkerHandle, index: int, family: str,
                   want_truth: bool, phase: str) -> None:
        """One trial: fresh inputs from a secret seed, the candidate's answer, its launch log kept."""
        trial = reference.trial(self.seed_source(), family, truth=want_truth)
        if family == FAMILY_TASK:
            self.reference_ops = trial.compute_ops
            self.bytes_moved = sum(t.numel() * t.element_size()
                                   for t in trivial.tensors(trial.inputs) + trivial.tensors(trial.expected))
        elif not trial.finite:
            notice = Notice(NoticeCode.FAMILY_SKIPPED,
                            f"input family {family!r} skipped: the reference output is not finite on it")
            if notice not in self.notices:
                self.notices.append(notice)
            return
        nonce = secrets.token_hex(8)
        candidate.allow_reply_bytes(trivial.tensors(trial.expected))
        candidate.channel.max_message_bytes += MAX_EXTERNAL_BYTES
        reply = self.expect(candidate.request("call", {"nonce": nonce, "inputs": trial.inputs, "trial": index}),
                             "called", f"{phase} (forward)")
        if reply.get("nonce") != nonce:
            raise ProtocolError("the reply answers another request (nonce mismatch)")
        previous = self.baselines.previous_mean(family, [e.shape for e in trivial.float_leaves(trial.expected)])
        review = self.record_call(index, trial, reply, previous)
        ran = checks.CallEvidence.parse(reply.get("evidence")).autotune
        self.records.append(replays.TrialRecord(
            index=index, family=family, inputs=trial.inputs, expected=trial.expected,
            compute_work=tuple(trial.compute_work), moved_elements=trial.moved_elements, log=reply.get("log"),
            configs=[(kernel, position) for kernel, _config, position, _count in ran],
            truth=trial.truth, previous_mean=previous, candidate_outputs=reply.get("outputs"),
            candidate_review=review))

    def config_combos(self) -> list[tuple[tuple[str, int], ...]]:
        """Each trial's autotune configs as one comparable combination (empty: no autotuning)."""
        return [tuple(sorted(record.configs)) for record in self.records]

    def records_without_a_peer(self) -> list[replays.TrialRecord]:
        """Trials that ran autotune configs no other trial ran in the same combination."""
        combos = self.config_combos()
        return [record for record, combo in zip(self.records, combos, strict=True)
                if combo and combos.count(combo) == 1]

    def configs_without_a_family(self) -> list[tuple[str, int, int]]:
        """``(kernel, position, count)`` of autotune configs no perturbed-family trial has run."""
        on_family = {config for record in self.records if record.family != FAMILY_TASK for config in record.configs}
        return [(kernel, position, count) for kernel, (_positions, count) in sorted(self.autotune_checked.items())
                for position in range(count) if (kernel, position) not in on_family]

    def note_kernels(self, ready: dict[str, Any]) -> None:
        """What the worker found after the import: the kernels, and any Python inside them."""
        found = ready.get("kernels", [])
        findings = ready.get("kernel_findings", [])
        if not isinstance(found, list) or not isinstance(findings, list):
            raise ProtocolError("malformed ready reply")
        self.kernels_found = bool(found)
        shown = [f[:500] for f in findings if isinstance(f, str)][:3]
        if shown and self.options.candidate_checks:
            self.add_violation(Violation(ViolationCode.PYTHON_IN_KERNEL, "; ".join(shown)))

    def note_tampering(self, tampered: Any, when: str) -> None:
        if not isinstance(tampered, list):
            raise ProtocolError("malformed tampering report")
        names = [t[:200] for t in tampered if isinstance(t, str)][:8]
        if names and self.options.candidate_checks:
            self.add_violation(Violation(ViolationCode.HARNESS_TAMPERING,
                                         f"the candidate changed the harness's environment {when}: {', '.join(names)}"))

    def record_call(self, index: int, trial: ReferenceTrial, reply: dict[str, Any],
                    previous: list[torch.Tensor] | None = None) -> OutputReview:
        # One float64 copy per tensor for all the checks of this trial's outputs (`shared_float64`).
        with shared_float64():
            return self._record_call(index, trial, reply, previous)

    def review_outputs(self, trial: ReferenceTrial, outputs: Any,
                       previous: list[torch.Tensor] | None) -> OutputReview:
        """Every check of one trial's outputs against the parent's own data, deciding nothing yet.

        Applied to the candidate's outputs (a filter: the candidate can send any) and to the clean
        room's replay of the same trial (which decides): within tolerance, a perturbed family's
        review, better than every trivial output (`previous`: the mean of the earlier trials'
        expected outputs of this family), and float32-accurate against the float64 evaluation.
        """
        comparison = compare_outputs(trial.expected, outputs, self.options.tolerance_for)
        comparison = trivial.review_family_trial(comparison, trial, outputs, self.options)
        review = OutputReview(comparison)
        if not comparison.passed:
            return review
        violation = trivial.check_beats_trivial(trial.expected, outputs, trial.inputs, previous,
                                                self.options.trivial_margin)
        if violation is not None:
            review.violations.append(violation)
        if self.options.precision_policy == "off":
            return review
        if trial.truth is None:
            review.notices.append(Notice(NoticeCode.PRECISION_UNCHECKED,
                                         "the reference could not be evaluated in float64; precision not checked"))
            return review
        violation = trivial.check_precision(trial.expected, outputs, trial.truth, self.options.precision_factor,
                                            self.options.precision_floor, self.solution_source)
        if violation is not None and self.options.precision_policy == "reject":
            review.violations.append(violation)
        elif violation is not None:
            review.notices.append(Notice(NoticeCode.CHECK_DISABLED, f"[{violation.code}] {violation.message}"))
        return review

    def apply_review(self, review: OutputReview) -> None:
        for violation in review.violations:
            self.add_violation(violation)
        for notice in review.notices:
            if notice not in self.notices:
                self.notices.append(notice)

    def _record_call(self, index: int, trial: ReferenceTrial, reply: dict[str, Any],
                     previous: list[torch.Tensor] | None) -> OutputReview:
        evidence = checks.CallEvidence.parse(reply.get("evidence"))
        outputs = reply.get("outputs")
        review = self.review_outputs(trial, outputs, previous)
        comparison = review.comparison
        message = comparison.message
        for kernel, _config, position, count in evidence.autotune:
            self.autotune_checked.setdefault(kernel, (set(), count))[0].add(position)
        if not comparison.passed and evidence.autotune:
            ran = "; ".join(f"{kernel} with config {config} (config {position + 1} of {count})"
                            for kernel, config, position, count in evidence.autotune)
            message = f"{message} [this trial ran {ran}]"
        self.trials.append(TrialReport(
            index=index, family=trial.family, passed=comparison.passed,
            max_abs_error=comparison.max_abs_error, max_rel_error=comparison.max_rel_error,
            mismatch_fraction=comparison.mismatch_fraction, message=message,
        ))
        expected_leaves = trivial.float_leaves(trial.expected)
        self.apply_review(review)
        self.baselines.add(trial.family, expected_leaves)
        for op in evidence.compute_ops:
            self.candidate_ops.setdefault(op, None)
        for launch in evidence.launches:
            self.launches.setdefault((launch.kernel, launch.candidate), []).append(launch.grid)
        if not self.options.candidate_checks:
            return review
        for violation in checks.run_call_checks(evidence, self.reference_ops, trial.compute_work,
                                                   trial.moved_elements):
            if violation.code == ViolationCode.NO_TRITON_LAUNCH and not self.kernels_found and not any(
                    launch.candidate for launch in evidence.launches):
                violation = Violation(ViolationCode.NO_TRITON_KERNEL,
                                      "the solution defines no Triton kernel (none was found after the import, and "
                                      "none was launched); write the computation as Triton kernels")
            self.add_violation(violation)
        return review

    def finish(self, failure: CandidateFailed | None, candidate: WorkerProcess | None, started: float) -> EvalResult:
        for kernel, (positions, count) in self.autotune_checked.items():
            if len(positions) < count:
                self.notices.append(Notice(NoticeCode.AUTOTUNE_PARTIAL,
                                           f"autotuned kernel {kernel}: the trials checked {len(positions)} of its "
                                           f"{count} configs (one per trial, in rotation); raise num_trials to "
                                           "check every config"))
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
            problem_size=self.problem.size,
            solution_hash=normalized_source_hash(self.solution_source),
            duration_s=round(time.monotonic() - started, 3),
            candidate_log=candidate.log_tail() if candidate is not None else "",
            phase_seconds={name: round(seconds, 4) for name, seconds in self.phases.items()},
        )
        if status == Status.OK:
            result.speedup_vs_compile = measurement.speedup_vs_compile(self.timing, self.options.max_speedup)
        result.reward = compute_reward(result, self.options.reward)
        return result


class CandidateLauncher(Protocol):
    """How the candidate worker is started: a fresh jailed process (`SpawnLauncher`, the default) or a
    child of a warm fork server (`tritongym.execution`). Either way the worker speaks the same
    protocol on `channel_fd`, and `start` returns a handle with `WorkerProcess`'s methods."""

    def candidate_cgroup(self, evaluation: _Evaluation, max_pids: int, memory_bytes: int) -> Cgroup | None:
        """The cgroup that caps this candidate (None: rlimits only; add a notice saying so)."""
        ...

    def start(self, module: str, source_path: str, **kwargs: Any) -> WorkerProcess:
        """Start the worker; keyword arguments are `sandbox.spawn_worker`'s."""
        ...


class SpawnLauncher:
    """One fresh ``python -I -m ...`` process per candidate (jailed by bwrap when the mode says so)."""

    def candidate_cgroup(self, evaluation: _Evaluation, max_pids: int, memory_bytes: int) -> Cgroup | None:
        return _candidate_cgroup(evaluation, max_pids, memory_bytes)

    def start(self, module: str, source_path: str, **kwargs: Any) -> WorkerProcess:
        return spawn_worker(module, source_path, **kwargs)


class ReferenceSource(Protocol):
    """Where an evaluation gets its reference runner: a fresh worker each time (`FreshReferences`)
    or a warm one kept per problem (`tritongym.execution`)."""

    def acquire(self, problem: Problem, device: str, timeout: float,
                memory_limit_bytes: int | None = None) -> ReferenceRunner: ...

    def release(self, runner: ReferenceRunner, reusable: bool) -> None: ...


class FreshReferences:
    """A new reference worker per evaluation, closed at its end."""

    def acquire(self, problem: Problem, device: str, timeout: float,
                memory_limit_bytes: int | None = None) -> ReferenceRunner:
        return ReferenceRunner(problem, device=device, timeout=timeout, memory_limit_bytes=memory_limit_bytes)

    def release(self, runner: ReferenceRunner, reusable: bool) -> None:
        runner.close()


def _spawn(module: str, source: Path, *, device: str, mode: str, job_dir: Path, log: Path,
           limits: ResourceLimits, interpret: bool, budget: Budget,
           problem_path: Path | None = None, cgroup: Cgroup | None = None,
           extra_args: tuple[str, ...] = (), source_text: str | None = None,
           memory_fraction: float = 0.5, launcher: CandidateLauncher | None = None) -> WorkerHandle:
    """Start a candidate worker and hand it the channel key before any candidate code runs."""
    parent_end, child_end = socket.socketpair()
    key = secrets.token_bytes(32)
    launcher = launcher or SpawnLauncher()
    try:
        process = launcher.start(module, str(source), device=device, mode=mode, job_dir=job_dir, log_path=log,
                                 channel_fd=child_end.fileno(), token=secrets.token_hex(12), limits=limits,
                                 interpret=interpret, problem_path=str(problem_path) if problem_path else None,
                                 cgroup=cgroup, extra_args=extra_args)
    except BaseException:
        parent_end.close()
        if cgroup is not None:
            cgroup.destroy()
        raise
    finally:
        child_end.close()
    channel = Channel(parent_end, verify_key=key)
    try:
        channel.send("hello", {"key": key.hex(), "source_sha256": hashlib.sha256(
            (source_text or "").encode("utf-8")).hexdigest(), "memory_fraction": memory_fraction})
    except OSError:
        pass  # the worker died at once: the first receive says how
    return WorkerHandle(process=process, channel=channel, budget=budget)


def _start_clean_room(job: Path, private: Path, *, device: str, mode: str, limits: ResourceLimits,
                      options: EvalOptions, source: str, launcher: CandidateLauncher,
                      budget: Budget | None = None) -> WorkerHandle:
    """The clean-room worker: jailed like the candidate, forked by the pool's server when it can."""
    if not getattr(launcher, "starts_clean_rooms", False):
        launcher = SpawnLauncher()
    cgroup = None
    if isinstance(launcher, SpawnLauncher):
        cgroup = create_cgroup(f"tritongym-room-{secrets.token_hex(8)}", options.max_processes, limits.memory_bytes
                               or (8 << 30))
    return _spawn("tritongym.evaluator.cleanroom.worker", job / "candidate.py", device=device, mode=mode,
                  job_dir=job, log=private / "cleanroom.log", limits=limits, interpret=device == "cpu",
                  budget=budget or Budget(options.timeout), cgroup=cgroup, source_text=source, launcher=launcher)


def _candidate_cgroup(evaluation: _Evaluation, max_pids: int, memory_bytes: int) -> Cgroup | None:
    """A pids+memory cgroup for the candidate, or a notice saying the caps are weaker."""
    cgroup = create_cgroup(f"tritongym-{secrets.token_hex(8)}", max_pids, memory_bytes)
    if cgroup is None or not {"pids", "memory"} <= set(cgroup.limits):
        have = ", ".join(sorted(cgroup.limits)) if cgroup else "none"
        evaluation.notices.append(Notice(
            NoticeCode.LIMITS_WEAKENED,
            f"no cgroup with pids and memory caps could be created here (have: {have}); the candidate's "
            "process count and memory are capped by rlimits only, which do not bind a root user's "
            "process count or a CUDA process's memory",
        ))
    return cgroup


def _static_verdict(evaluation: _Evaluation, report: StaticReport, started: float) -> EvalResult | None:
    """The verdict when the source alone decides it (syntax, no ModelNew, forbidden, no kernel)."""
    for finding in report.findings:
        evaluation.notices.append(Notice(NoticeCode.STATIC_FINDING, finding))
    if not report.defines_model_new and _looks_like_a_file_name(evaluation.solution_source):
        text = evaluation.solution_source.strip()
        return evaluation.finish(CandidateFailed(
            Status.COMPILE_ERROR, f"the solution is the one-line text {text[:200]!r}, not Python source: a str "
            f"solution is always source text; to evaluate a file, pass pathlib.Path({text[:200]!r}) (or its "
            "contents)"), None, started)
    if report.syntax_error:
        return evaluation.finish(CandidateFailed(Status.COMPILE_ERROR, report.syntax_error), None, started)
    if not report.defines_model_new:
        return evaluation.finish(CandidateFailed(
            Status.COMPILE_ERROR, "the solution does not define `class ModelNew` at module level"), None, started)
    if report.forbidden:
        shown = "; ".join(report.forbidden[:6]) + (" ..." if len(report.forbidden) > 6 else "")
        evaluation.add_violation(Violation(
            ViolationCode.FORBIDDEN_CONSTRUCT,
            f"the solution uses constructs a kernel solution never needs and harness attacks do ({shown}); no "
            "introspection of frames or code, processes, threads, raw descriptors or monkeypatching"))
    if not report.uses_triton:
        evaluation.add_violation(Violation(
            ViolationCode.NO_TRITON_KERNEL,
            "the solution does not import triton, so it defines no Triton kernel; write the computation as "
            "Triton kernels"))
    if evaluation.violations:
        return evaluation.finish(None, None, started)
    return None


def _environment_notices(mode: str, device: str, options: EvalOptions) -> list[Notice]:
    """What every result from this environment must say about itself."""
    notices = []
    if mode == "none":
        notices.append(Notice(
            NoticeCode.SANDBOX_DISABLED,
            "the candidate ran without the OS sandbox (sandbox: none): it could reach the network, the "
            "file system and other processes of this user; install bubblewrap for isolation",
        ))
    if device == "cpu" and not options.time_on_cpu:
        notices.append(Notice(
            NoticeCode.TIMING_UNAVAILABLE,
            "timing and profiling are not done on a CPU: the Triton interpreter says nothing about GPU "
            "speed; speedup and coverage are null and the reward has no speed or coverage term (PR/PRS "
            "need a GPU)",
        ))
    elif device == "cpu":
        notices.append(Notice(
            NoticeCode.TIMING_NOT_MEANINGFUL,
            "timed on a CPU with a host clock to exercise the timing protocol (time_on_cpu); the figures "
            "say nothing about GPU speed and the reward ignores them",
        ))
    return notices


def _apply_audit_tolerance(evaluation: _Evaluation, options: EvalOptions) -> EvalOptions:
    """The options with the audit's stricter tolerance when the task audit flagged this problem."""
    if not options.use_audit_tolerance:
        return options
    flagged = audit_flags().get(evaluation.problem.content_hash)
    if flagged is None or (flagged.atol is None and flagged.rtol is None):
        return options
    configured = options.tolerance_for(torch.float32)
    atol = configured.atol if flagged.atol is None else min(flagged.atol, configured.atol)
    rtol = configured.rtol if flagged.rtol is None else min(flagged.rtol, configured.rtol)
    options = replace(options, atol=atol, rtol=rtol)
    evaluation.options = options
    evaluation.notices.append(Notice(
        NoticeCode.AUDIT_TOLERANCE,
        f"the task audit flagged this problem ({', '.join(flagged.flags)}); using its stricter "
        f"tolerance atol={atol:g}, rtol={rtol:g}"))
    return options


def evaluate(
    problem: Problem | str | os.PathLike[str],
    solution: str | os.PathLike[str],
    options: EvalOptions | None = None,
    **overrides: Any,
) -> EvalResult:
    """Evaluate a candidate `ModelNew` against a KernelBench-format problem.

    Args:
        problem: a `Problem`, or the path of a problem ``.py`` file.
        solution: the candidate's source text (a `str`, always), or the path of a file
            (`os.PathLike`, e.g. ``pathlib.Path("solution.py")``). A one-line ``"x.py"`` string is
            text and gets a ``compile_error`` that says to pass a `Path`.
        options: an `EvalOptions`; keyword `overrides` replace its fields (``timeout=60``).

    Returns:
        The verdict. Every candidate behaviour ends in one; see `Status`.

    Raises:
        ProblemError: the problem is malformed or its reference fails on its own.
        SolutionError: the solution file cannot be read.
        OptionsError: an option is invalid (for example ``device='cuda'`` without a GPU).
        EvaluatorError: a worker process could not be started.

    Many evaluations at once: `tritongym.evaluate_many` (a warm pool of sandboxed workers).
    """
    options = replace(options or EvalOptions(), **overrides) if overrides else (options or EvalOptions())
    return run_evaluation(problem, solution, options)


def run_evaluation(
    problem: Problem | str | os.PathLike[str],
    solution: str | os.PathLike[str],
    options: EvalOptions,
    *,
    launcher: CandidateLauncher | None = None,
    references: ReferenceSource | None = None,
    phase_seconds: dict[str, float] | None = None,
) -> EvalResult:
    """`evaluate` with the worker strategy chosen by the caller (the execution layer's pool).

    `launcher` starts the candidate worker (default: a fresh process), `references` provides the
    reference runner (default: a fresh worker, closed at the end); `phase_seconds` holds phases
    measured before this call (the pool's queue wait). The verdict logic is the same either way.
    """
    started = time.monotonic()
    problem = _as_problem(problem)
    source = _read_solution(solution)
    device = resolve_device(options.device)
    references = references or FreshReferences()
    evaluation = _Evaluation(problem=problem, solution_source=source, options=options, device=device,
                             sandbox="not started")
    evaluation.phases.update(phase_seconds or {})
    if options.seed is not None:
        rng = random.Random(options.seed)
        evaluation.seed_source = lambda: rng.getrandbits(63)
    early = _static_verdict(evaluation, inspect_source(source), started)
    if early is not None:
        return early
    mode = resolve_mode(options.sandbox)
    evaluation.sandbox = mode
    evaluation.notices.extend(_environment_notices(mode, device, options))
    options = _apply_audit_tolerance(evaluation, options)
    seed_for_weights = evaluation.seed_source()
    private = Path(tempfile.mkdtemp(prefix="tritongym-"))
    reference = candidate = prestarted_room = None
    room_taken = False
    reference_reusable = False
    failure: CandidateFailed | None = None
    try:
        phase_started = time.monotonic()
        job = private / "job"
        job.mkdir()
        (job / "candidate.py").write_text(source, encoding="utf-8")
        # The candidate worker reads the problem only to make timing inputs; the reference
        # worker reads its own copy, outside the candidate's reach.
        (job / "problem.py").write_text(problem.source, encoding="utf-8")
        interpret = device == "cpu"
        memory_bytes = int(options.memory_limit_gb * (1 << 30))
        candidate_limits = ResourceLimits(memory_bytes=memory_bytes, max_processes=options.max_processes,
                                          job_dir_bytes=options.disk_limit_mb << 20,
                                          cpu_seconds=int(options.timeout * 4 + 60))
        launcher = launcher or SpawnLauncher()
        cgroup = launcher.candidate_cgroup(evaluation, options.max_processes, memory_bytes)
        candidate = _spawn("tritongym.evaluator.worker.candidate", job / "candidate.py", device=device,
                           mode=mode, job_dir=job, log=private / "candidate.log", limits=candidate_limits,
                           interpret=interpret, budget=Budget(options.timeout),
                           problem_path=job / "problem.py", cgroup=cgroup,
                           extra_args=(("--allow-forbidden",) if ViolationCode.FORBIDDEN_CONSTRUCT
                                       in options.disabled_checks else ()), source_text=source,
                           memory_fraction=options.candidate_memory_fraction, launcher=launcher)
        if isinstance(launcher, SpawnLauncher):
            # A fresh clean room imports torch and Triton for a second or two: started now, that
            # overlaps the candidate's and the reference's start and the trials instead of following
            # them. It gets nothing until the trials are done (a pool's forked rooms start in
            # milliseconds, when needed).
            prestarted_room = _start_clean_room(job, private, device=device, mode=mode, limits=candidate_limits,
                                                options=options, source=source, launcher=launcher,
                                                budget=candidate.budget)
        # The reference is capped like the candidate (on a CPU: where a GPU runs the problem, its
        # original-size inputs are made on the host first and may legitimately exceed the cap).
        reference = references.acquire(problem, device, options.reference_timeout,
                                       memory_limit_bytes=memory_bytes if device == "cpu" else None)
        evaluation.phases["startup"] = time.monotonic() - phase_started
        try:
            evaluation.run_trials(reference, candidate, seed_for_weights)
            on_gpu = device.startswith("cuda")
            wants_timing = options.measure_speed and (on_gpu or options.time_on_cpu)
            if evaluation.passing() and evaluation.records:
                phase_started = time.monotonic()
                def start_room() -> WorkerHandle:
                    nonlocal room_taken
                    room_taken = True  # run_clean_room closes the room it takes
                    # One budget for the whole evaluation: the clean room is charged to the candidate's.
                    return prestarted_room or _start_clean_room(
                        job, private, device=device, mode=mode, limits=candidate_limits, options=options,
                        source=source, launcher=launcher, budget=candidate.budget)

                evaluation.run_clean_room(start_room, reference=reference,
                    time_reps=options.timing_reps if wants_timing else 0,
                    profile_calls=options.profile_calls if on_gpu else 0)
                evaluation.phases["clean_room"] = time.monotonic() - phase_started
            measurement.note_device(evaluation, reference)
            if evaluation.passing() and wants_timing:
                phase_started = time.monotonic()
                measurement.run_timing(evaluation, reference, candidate)
                evaluation.phases["timing"] = time.monotonic() - phase_started
            if evaluation.passing() and on_gpu and options.profile_calls > 0:
                phase_started = time.monotonic()
                measurement.run_profile(evaluation, candidate)
                evaluation.phases["profile"] = time.monotonic() - phase_started
            reference_reusable = True
        except CandidateFailed as exc:
            failure = exc
            # The reference answered every request it got; on a GPU a timing session may be half
            # way, so only a CPU reference is kept after a candidate's failure.
            reference_reusable = device == "cpu"
        except TritongymError:
            raise  # the problem, the options or the machine: not the candidate's doing
        except Exception as exc:  # noqa: BLE001 - whatever a worker sends ends in a verdict
            failure = CandidateFailed(Status.CRASHED, "the evaluator could not process the candidate worker's "
                                      f"replies ({type(exc).__name__}: {str(exc)[:300]}); treated as a crash")
        return evaluation.finish(failure, candidate.process, started)
    finally:
        unused_room = prestarted_room if prestarted_room is not None and not room_taken else None
        for worker in (candidate, unused_room):
            if worker is None:
                continue
            try:
                worker.channel.send("exit")
            except OSError:
                pass
            worker.process.release()
            worker.channel.close()
        if reference is not None:
            references.release(reference, reference_reusable)
        shutil.rmtree(private, ignore_errors=True)
