"""The measurement phases of an evaluation: timing (interleaved, rechecked) and profiling.

They run after the correctness trials, only for candidates that passed them, and only where the
figures mean something (a GPU; timing also on a CPU with ``time_on_cpu`` for protocol tests).
On a GPU each phase holds the GPU's exclusive lock (`device.device_lock`), so two evaluations
never time or profile on one GPU at once. The rules that bound what the candidate worker
reports are in `plausibility`; the worker side is `timing.TimingSession` and
`profiling.profile_forward`. Everything the candidate worker sends is validated here: a reply
of the wrong shape, or a time that is not a finite positive number, ends the phase with a
verdict (``crashed`` or ``implausible_timing``), never an exception out of `evaluate()`.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tritongym.evaluator import plausibility
from tritongym.evaluator.common import device as gpu
from tritongym.evaluator.common.channel import ChannelClosed, Message, ProtocolError
from tritongym.evaluator.common.profiles import KernelTime
from tritongym.evaluator.compare import compare_outputs
from tritongym.evaluator.coverage import coverage_from_kernels, is_candidate_kernel
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.reference import ReferenceRunner
from tritongym.evaluator.result import (
    KernelProfile,
    Notice,
    NoticeCode,
    Status,
    TimingReport,
    Violation,
    ViolationCode,
)
from tritongym.evaluator.session import CandidateFailed, WorkerHandle

#: A number in a reference worker's reply (its fields are checked there: `ReferenceRunner.request`).
_NUMBER = (int, float)


class _Evaluation(Protocol):
    """What the measurement phases read and write of an evaluation in progress (`parent._Evaluation`
    has it; a Protocol, so that this module does not import the parent that calls it)."""

    options: EvalOptions
    device: str
    notices: list[Notice]
    bytes_moved: int
    timing: TimingReport | None
    replay_ms: list[float]
    room_profile: tuple[list[KernelTime], list[str], dict[str, int] | None] | None
    coverage: float | None
    kernel_profile: list[KernelProfile]
    seed_source: Callable[[], int]

    def add_violation(self, violation: Violation) -> None: ...

    def expect(self, message: Message, kind: str, phase: str) -> dict[str, Any]: ...

#: Replies the candidate worker sends in these phases, bounded before they are believed.
_MAX_PROFILE_ENTRIES = 10_000


def _is_cuda(device: str) -> bool:
    return device == "cuda" or device.startswith("cuda:")


@contextlib.contextmanager
def gpu_lock(evaluation: _Evaluation) -> Iterator[None]:
    """The exclusive per-GPU lock on a GPU, nothing on a CPU (waiting is not the candidate's time)."""
    if not _is_cuda(evaluation.device):
        yield
        return
    with gpu.device_lock(evaluation.device, exclusive=True, timeout=evaluation.options.reference_timeout):
        yield


def _add_notice(evaluation: _Evaluation, code: NoticeCode, message: str) -> None:
    notice = Notice(code, message)
    if notice not in evaluation.notices:
        evaluation.notices.append(notice)


def note_device(evaluation: _Evaluation, reference: ReferenceRunner) -> None:
    """Notices about the device, added once after the reference is set up (the parent calls it).

    On a GPU: IEEE float32 in the reference, other processes on the GPU or an exclusive compute
    mode. Anywhere: a torch.compile baseline that cannot be measured (on a CPU).
    """
    if _is_cuda(evaluation.device):
        if reference.fp32_note:
            _add_notice(evaluation, NoticeCode.REFERENCE_IEEE_FP32,
                        f"the reference ran in IEEE float32 with TF32 off ({reference.fp32_note}): expected outputs "
                        "and the baseline's speed are float32's; the candidate's own TF32 use is its choice and "
                        "the precision check judges it")
        shared = gpu.sharing_notice(gpu.sharing_report(evaluation.device))
        if shared:
            _add_notice(evaluation, NoticeCode.GPU_SHARED, shared)
    else:
        _note_baseline_on_cpu(evaluation)


def _note_baseline_on_cpu(evaluation: _Evaluation) -> None:
    if evaluation.options.baseline != "eager":
        _add_notice(evaluation, NoticeCode.BASELINE_UNAVAILABLE,
                    f"baseline {evaluation.options.baseline!r} (torch.compile) is measured on a GPU only; "
                    "speedup_vs_compile is null")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_timing(evaluation: _Evaluation, reference: ReferenceRunner, candidate: WorkerHandle) -> None:
    """Time reference and candidate in interleaved blocks; recheck secret timed outputs."""
    with gpu_lock(evaluation):
        _run_timing(evaluation, reference, candidate)


def _run_timing(evaluation: _Evaluation, reference: ReferenceRunner, candidate: WorkerHandle) -> None:
    options = evaluation.options
    cuda = _is_cuda(evaluation.device)
    variants = ["compile"] if cuda and options.baseline in ("compile", "both") else []
    eager_timed = options.baseline != "compile" or not cuda
    if not cuda:
        _note_baseline_on_cpu(evaluation)
    phase = "timing warm-up"
    samples: dict[str, list[float]] = {"ref": [], "ref_host": [], "ref_rt": [], "compile": [],
                                       "cand": [], "cand_host": [], "cand_rt": []}
    charged = 0
    try:
        ref_ready = reference.request("time_start", {"warmup_ms": options.warmup_ms, "variants": variants},
                                      "time_ready", optional={"variants": (dict, type(None)), "method": str,
                                                              "device_name": str, "dense_matmul_flops": _NUMBER,
                                                              "dispatch_ms": _NUMBER})
        failed = {name: why for name, why in (ref_ready.get("variants") or {}).items() if why}
        for name, why in failed.items():
            _add_notice(evaluation, NoticeCode.BASELINE_UNAVAILABLE,
                        f"the {name} baseline could not be built or warmed up ({str(why)[:300]}); "
                        + ("timing against the eager reference" if options.baseline == "compile" else
                           "speedup_vs_compile is null"))
        variants = [v for v in variants if v not in failed]
        if options.baseline == "compile" and not variants:
            eager_timed = True
        cand_ready = evaluation.expect(candidate.request("time_start", {"warmup_ms": options.warmup_ms}),
                                       "time_ready", phase)
        if cuda:
            ref_ready = _hold_both(evaluation, reference, candidate, ref_ready, cand_ready, phase)
        reps = options.timing_reps
        block_sizes = [reps // options.timing_blocks + (1 if b < reps % options.timing_blocks else 0)
                       for b in range(options.timing_blocks)]
        rechecked = set(secrets.SystemRandom().sample(range(reps), min(options.timing_rechecks, reps)))
        rep_index = 0
        for block, size in enumerate(block_sizes):
            phase = f"timing block {block}"
            # The reference's round trips come from whichever variant is the speedup's baseline.
            for variant in (["eager"] if eager_timed else []) + variants:
                for _ in range(size):
                    sent = time.perf_counter()
                    done = reference.request("rep", {"seed": evaluation.seed_source(), "variant": variant},
                                             "rep_done", required={"ms": _NUMBER, "host_ms": _NUMBER})
                    reference.request("drop", {}, "dropped")
                    elapsed = (time.perf_counter() - sent) * 1e3
                    if variant == "eager" or not eager_timed:
                        samples["ref_rt"].append(elapsed)
                    if variant == "eager":
                        samples["ref"].append(float(done["ms"]))
                        samples["ref_host"].append(float(done["host_ms"]))
                    else:
                        samples["compile"].append(float(done["ms"]))
            for _ in range(size):
                call = _candidate_call(evaluation, reference, candidate, phase, rep_index, rep_index in rechecked)
                if call is None:
                    return
                done, round_trip = call
                samples["cand"].append(float(done["ms"]))
                samples["cand_host"].append(float(done["host_ms"]))
                charged += done.get("charged") is True
                if round_trip is not None:
                    samples["cand_rt"].append(round_trip)
                rep_index += 1
        if _blocks_contradict_the_report(samples):
            phase = "timing confirmation"
            _time_pairs(evaluation, reference, candidate, "eager" if eager_timed else variants[0],
                        max(len(samples["cand_rt"]), _MIN_PAIRS), rep_index, samples)
    except TimeoutError as exc:
        raise CandidateFailed(Status.TIMEOUT, f"the candidate exceeded the {evaluation.options.timeout:g} s "
                                              f"budget during {phase}") from exc
    except (ChannelClosed, ProtocolError, KeyError, TypeError, ValueError) as exc:
        reason = candidate.process.wait_exit(grace=2.0)
        raise CandidateFailed(Status.CRASHED, f"the candidate broke the timing protocol during {phase} "
                                              f"({reason}): {exc}") from exc
    _judge_timing(evaluation, reference, ref_ready, samples, charged)


#: Pairs in the confirmation pass at the least (the standard error needs a few; `plausibility`).
_MIN_PAIRS = 8


def _blocks_contradict_the_report(samples: dict[str, list[float]]) -> bool:
    """Whether the block pass's round trips say the candidate's calls take over 3× what it reports."""
    baseline = samples["ref"] or samples["compile"]
    if not (samples["cand_rt"] and samples["ref_rt"] and baseline):
        return False
    estimate = plausibility.wall_clock_estimate_ms(samples["cand_rt"], samples["ref_rt"], baseline)
    margin = plausibility.jitter_margin_ms(samples["cand_rt"], samples["ref_rt"])
    return not plausibility.wall_clock_consistent(samples["cand"], estimate, margin)


def _candidate_call(evaluation: _Evaluation, reference: ReferenceRunner, candidate: WorkerHandle, phase: str,
                    rep_index: int, recheck: bool) -> tuple[dict[str, Any], float | None] | None:
    """One timed candidate call: ``rep``, then ``keep`` or ``drop``, then its evidence.

    Whether the output is kept is decided after the call (`recheck`, drawn secretly by the caller),
    so every call must compute it: a kept output is compared with the reference's for the same seed
    (`TIMED_OUTPUT_MISMATCH`). Returns the ``rep_done`` reply (its ``ms`` and ``host_ms`` checked
    positive) and the call's round trip in ms, None when kept (its output travels back too); None
    instead of the pair after a non-positive time (the violation added). The evidence is collected
    after the parent's clock stopped (equal cost on both sides).
    """
    seed = evaluation.seed_source()
    sent = time.perf_counter()
    done = evaluation.expect(candidate.request("rep", {"seed": seed}), "rep_done", phase)
    ms, host_ms = done.get("ms"), done.get("host_ms")
    if not all(_number(v) and v > 0 for v in (ms, host_ms)):
        evaluation.add_violation(Violation(
            ViolationCode.IMPLAUSIBLE_TIMING,
            f"a timed call reported {ms!r} ms (host {host_ms!r} ms); times must be positive"))
        return None
    round_trip = None
    if recheck:
        kept = evaluation.expect(candidate.request("keep", {}), "output", phase)
        expected = reference.request("expected_for", {"seed": seed}, "expected", required={"expected": object})
        comparison = compare_outputs(expected["expected"], kept.get("outputs"), evaluation.options.tolerance_for)
        if not comparison.passed:
            evaluation.add_violation(Violation(
                ViolationCode.TIMED_OUTPUT_MISMATCH,
                f"the output of timed call {rep_index} did not match the reference "
                f"({comparison.message}); outputs must be computed on every call"))
    else:
        evaluation.expect(candidate.request("drop", {}), "dropped", phase)
        round_trip = (time.perf_counter() - sent) * 1e3
    observed = evaluation.expect(candidate.request("observe", {}), "observed", phase)
    check_rep_evidence(evaluation, observed, rep_index)
    return done, round_trip


def _time_pairs(evaluation: _Evaluation, reference: ReferenceRunner, candidate: WorkerHandle, variant: str,
                timed: int, rep_index: int, samples: dict[str, list[float]]) -> None:
    """The paired confirmation pass (`plausibility`): `timed` back-to-back round trips of both
    workers, and among them, at secret places, as many rechecked calls as the blocks have.

    Fills ``samples["pair_diff"]`` (candidate minus reference round trip, ms) and
    ``samples["pair_cand"]`` (the candidate's reported ms in this pass). Each candidate call is one
    of the blocks' (`_candidate_call`), outputs rechecked at random as often: a candidate that can
    tell this pass from the blocks (it counts its calls) must still compute every call here, so it
    cannot make the pairs fast by skipping the work.
    """
    phase = "timing confirmation"
    samples["pair_diff"], samples["pair_cand"] = [], []
    count = timed + min(evaluation.options.timing_rechecks, timed)
    rechecked = set(secrets.SystemRandom().sample(range(count), count - timed))

    def reference_round_trip() -> float:
        sent = time.perf_counter()
        reference.request("rep", {"seed": evaluation.seed_source(), "variant": variant}, "rep_done",
                          required={"ms": _NUMBER, "host_ms": _NUMBER})
        reference.request("drop", {}, "dropped")
        return (time.perf_counter() - sent) * 1e3

    for pair in range(count):
        recheck = pair in rechecked
        reference_ms = reference_round_trip() if pair % 2 == 0 and not recheck else None
        call = _candidate_call(evaluation, reference, candidate, phase, rep_index + pair, recheck)
        if call is None:
            return
        done, candidate_ms = call
        samples["pair_cand"].append(float(done["ms"]))
        if candidate_ms is None:
            continue  # a kept call: its output travelled back, so its round trip is not compared
        if reference_ms is None:
            reference_ms = reference_round_trip()
        samples["pair_diff"].append(candidate_ms - reference_ms)


def shared_dispatch_ms(ref_ready: dict[str, Any], cand_ready: dict[str, Any]) -> float:
    """The dispatch time both workers hold their streams for: the larger of the two reported.

    The candidate's figure is a claim: one that is not a finite non-negative number counts as 0
    (its own dispatch is then timed, at its cost). A claim that is too high holds both sides
    longer (bounded by `timing.HOLD_MAX_MS` in the workers), which hides host time, not device
    work: outputs computed on the host are the host-data budget's business, work left on other
    streams is the tail's and the clean room's replay's.
    """
    def valid(value: Any) -> float:
        return float(value) if _number(value) and value >= 0 else 0.0

    return max(valid(ref_ready.get("dispatch_ms")), valid(cand_ready.get("dispatch_ms")))


def _hold_both(evaluation: _Evaluation, reference: ReferenceRunner, candidate: WorkerHandle,
               ref_ready: dict[str, Any], cand_ready: dict[str, Any], phase: str) -> dict[str, Any]:
    """Hold both workers' streams after each flush for the same time (`timing.RepTimer.hide_dispatch`).

    Equal holds: a worker whose dispatch outlasts the flush is not timed as host time, and the
    parent's round-trip cross-check (`plausibility`) still compares device work with device work.
    Returns the reference's ``time_ready`` with its timing method as held.
    """
    dispatch = shared_dispatch_ms(ref_ready, cand_ready)
    held = reference.request("hold", {"dispatch_ms": dispatch}, "held",
                             required={"hold_ms": _NUMBER}, optional={"method": str})
    evaluation.expect(candidate.request("hold", {"dispatch_ms": dispatch}), "held", phase)
    return {**ref_ready, "method": held.get("method", ref_ready.get("method", ""))}


def _judge_timing(evaluation: _Evaluation, reference: ReferenceRunner, ref_ready: dict[str, Any],
                  samples: dict[str, list[float]], charged: int) -> None:
    meaningful = _is_cuda(evaluation.device)
    candidate_median = statistics.median(samples["cand"])
    baseline_samples = samples["ref"] if samples["ref"] else samples["compile"]
    estimate = margin = None
    if samples["cand_rt"] and samples["ref_rt"]:
        estimate = plausibility.wall_clock_estimate_ms(samples["cand_rt"], samples["ref_rt"], baseline_samples)
        margin = plausibility.jitter_margin_ms(samples["cand_rt"], samples["ref_rt"])
        if not plausibility.wall_clock_consistent(samples["cand"], estimate, margin) and samples.get("pair_diff"):
            # The blocks contradict the report; the paired pass (run for that reason) decides.
            block_estimate, block_margin = estimate, margin
            estimate = plausibility.paired_estimate_ms(samples["pair_diff"], baseline_samples)
            margin = plausibility.paired_margin_ms(samples["pair_diff"])
            # Both the blocks' reports (the speedup's) and this pass's must agree with the pairs' clock:
            # a candidate that forges the blocks and reports the truth here is still caught.
            if not (plausibility.wall_clock_consistent(samples["cand"], estimate, margin)
                    and plausibility.wall_clock_consistent(samples["pair_cand"], estimate, margin)):
                evaluation.add_violation(Violation(
                    ViolationCode.IMPLAUSIBLE_TIMING,
                    f"the candidate reported a median of {candidate_median:.4g} ms per call, but the evaluator's "
                    f"own clock puts it at about {block_estimate:.4g} ms (jitter margin {block_margin:.3g} ms), "
                    f"and at {estimate:.4g} ms (margin {margin:.3g} ms) over {len(samples['pair_diff'])} "
                    "back-to-back pairs; reported times must be real"))
    if charged:
        _add_notice(evaluation, NoticeCode.TIMING_TAIL_CHARGED,
                    f"in {charged} of {len(samples['cand'])} timed calls work went on after the end event (other "
                    "streams); those calls were timed to the point the device went idle")
    floor_ms = bandwidth = flop_floor = None
    if meaningful:
        measured = reference.request("bandwidth", {}, "bandwidth",
                                     optional={"bytes_per_s": _NUMBER, "flops_per_s": _NUMBER})
        bandwidth = float(measured.get("bytes_per_s", 0.0))
        floor_ms = plausibility.physics_floor_ms(evaluation.bytes_moved, bandwidth)
        if candidate_median < floor_ms:
            evaluation.add_violation(Violation(
                ViolationCode.IMPLAUSIBLE_SPEEDUP,
                f"a median of {candidate_median:.4g} ms per call is faster than moving the task's "
                f"{evaluation.bytes_moved / 1e6:.3g} MB allows at this device's measured bandwidth "
                f"({bandwidth / 1e9:.0f} GB/s, floor {floor_ms:.4g} ms)"))
        flops = float(ref_ready.get("dense_matmul_flops", 0) or 0)
        flop_floor = plausibility.flop_floor_ms(flops, float(measured.get("flops_per_s", 0.0) or 0.0))
        if flop_floor is not None and candidate_median < flop_floor:
            confirmed = estimate is not None and margin is not None and plausibility.corroborated(
                candidate_median, estimate, margin)
            if confirmed:
                _add_notice(evaluation, NoticeCode.FLOP_FLOOR_BEATEN,
                            f"a median of {candidate_median:.4g} ms is below the {flop_floor:.4g} ms the reference's "
                            f"{flops:.3g} dense matmul FLOPs take at this device's half-precision GEMM rate; the "
                            "evaluator's own clock confirms it (the candidate must skip work the reference does)")
            else:
                evaluation.add_violation(Violation(
                    ViolationCode.IMPLAUSIBLE_SPEEDUP,
                    f"a median of {candidate_median:.4g} ms per call is below the {flop_floor:.4g} ms the "
                    f"reference's {flops:.3g} dense matmul FLOPs take at this device's measured half-precision "
                    f"GEMM rate, and the evaluator's own clock puts the call at about {estimate} ms"))
    compile_median = statistics.median(samples["compile"]) if samples["compile"] else None
    charged_ms, replay_median = charged_candidate_ms(candidate_median, evaluation.replay_ms)
    if replay_median is not None and replay_median > REPLAY_NOTICE_RATIO * candidate_median:
        _add_notice(evaluation, NoticeCode.TIMING_FROM_REPLAY,
                    f"the clean room's replay of the forward's logged launches and ops took {replay_median:.4g} ms "
                    f"per call (median of {len(evaluation.replay_ms)}), more than the {candidate_median:.4g} ms "
                    "the candidate worker reported; the speedup uses the replay's figure")
    evaluation.timing = TimingReport(
        method=str(ref_ready.get("method", "")),
        device_name=str(ref_ready.get("device_name", "")),
        reference_median_ms=statistics.median(baseline_samples),
        candidate_median_ms=charged_ms,
        reference_reps=len(baseline_samples),
        candidate_reps=len(samples["cand"]),
        reference_host_median_ms=statistics.median(samples["ref_host"]) if samples["ref_host"] else None,
        candidate_host_median_ms=statistics.median(samples["cand_host"]),
        wall_clock_estimate_ms=estimate,
        floor_ms=floor_ms,
        bandwidth_gbps=None if bandwidth is None else bandwidth / 1e9,
        meaningful=meaningful,
        baseline="eager" if samples["ref"] else "compile",
        compile_reference_median_ms=compile_median,
        flop_floor_ms=flop_floor,
        charged_reps=charged,
        reported_median_ms=candidate_median,
        replay_median_ms=replay_median,
        replay_reps=len(evaluation.replay_ms),
    )


#: A replay this much slower than the candidate's own report is named in a notice (noise below).
REPLAY_NOTICE_RATIO = 1.1


def charged_candidate_ms(reported_median_ms: float, replay_ms: list[float]) -> tuple[float, float | None]:
    """The candidate's time per forward that the speedup uses, and the replay's median.

    KernelBench and KernelGYM time the whole ``forward``, host overhead included; the candidate
    worker measures that (`timing.RepTimer`), but it runs candidate code, so its figure is a claim,
    bounded by the parent's clock to within the jitter margin (`plausibility`). The clean room
    replays the same forward's logged launches and ops with the same timer and no candidate Python:
    a figure no report can lower, but without the candidate's host overhead. The charged time is
    the larger of the two medians: an honest candidate pays its own forward (which does at least
    the logged work, plus its Python), a lie below the logged work's cost gains nothing.
    """
    if not replay_ms:
        return reported_median_ms, None
    replay_median = statistics.median(replay_ms)
    return max(reported_median_ms, replay_median), replay_median


def speedup_vs_compile(timing: TimingReport | None, max_speedup: float) -> float | None:
    """The candidate's speedup over ``torch.compile(Model)``, clamped like `speedup` (None if not timed)."""
    if timing is None or timing.compile_reference_median_ms is None or timing.candidate_median_ms <= 0:
        return None
    return min(timing.compile_reference_median_ms / timing.candidate_median_ms, max_speedup)


def parse_profile_reply(reply: Any) -> tuple[list[KernelTime], list[str], dict[str, int] | None]:
    """The kernels, the candidate's exact kernel names and launch counts of a ``profiled`` reply.

    Raises ValueError for anything an honest worker never sends (wrong types, negative or
    non-finite times, too many entries): the caller turns it into a ``crashed`` verdict.
    """
    if not isinstance(reply, dict):
        raise ValueError("the profile reply is not an object")
    entries = reply.get("kernels")
    if not isinstance(entries, list) or len(entries) > _MAX_PROFILE_ENTRIES:
        raise ValueError("the profile reply's kernels are not a list of bounded length")
    kernels = []
    for entry in entries:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3 and isinstance(entry[0], str)
                and _number(entry[1]) and entry[1] >= 0 and isinstance(entry[2], int)
                and not isinstance(entry[2], bool) and entry[2] >= 0):
            raise ValueError(f"malformed profile entry {str(entry)[:200]}: expected [name, device_us >= 0, count]")
        kernels.append(KernelTime(entry[0], float(entry[1]), entry[2]))

    def names(key: str) -> list[str]:
        value = reply.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"the profile reply's {key} is not a list of names")
        return value

    compiled, python_names = names("candidate_compiled_kernels"), names("candidate_kernels")
    counts = reply.get("candidate_launch_counts")
    if counts is not None:
        if not isinstance(counts, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                   and v >= 0 for k, v in counts.items()):
            raise ValueError("the profile reply's candidate_launch_counts is not a {name: count} object")
    return kernels, (compiled or python_names), counts


def run_profile(evaluation: _Evaluation, candidate: WorkerHandle) -> None:
    """Coverage: the share of GPU time spent in the candidate's own Triton kernels.

    The candidate worker profiles its own forward calls (checked for tampering like timed calls);
    when the clean room profiled replays of the logged work (`evaluation.room_profile`), the
    coverage and the kernel table come from those.
    """
    try:
        with gpu_lock(evaluation):
            reply = evaluation.expect(candidate.request("profile", {"calls": evaluation.options.profile_calls}),
                                       "profiled", "profiling")
        kernels, mine, counts = parse_profile_reply(reply)
        # The identities and the harness are checked after the profiled calls as after timed ones
        # (the worker sends its observation in the reply when it has one).
        if any(key in reply for key in ("tampered", "refused", "threads_after")):
            check_rep_evidence(evaluation, reply, None)
        if evaluation.room_profile is not None:
            # The decision: the clean room's replays of the logged work, not the candidate's own
            # profile (a filter for the checks above, run in a process the candidate controls).
            kernels, mine, counts = evaluation.room_profile
        coverage = coverage_from_kernels(kernels, mine, counts)
    except TimeoutError as exc:
        raise CandidateFailed(Status.TIMEOUT, f"the candidate exceeded the {evaluation.options.timeout:g} s "
                                              "budget during profiling") from exc
    except (ChannelClosed, ProtocolError, KeyError, TypeError, ValueError) as exc:
        reason = candidate.process.wait_exit(grace=2.0)
        raise CandidateFailed(Status.CRASHED, f"the candidate broke the profiling protocol ({reason}): "
                                              f"{exc}") from exc
    evaluation.coverage = coverage
    evaluation.kernel_profile = [
        KernelProfile(kernel=k.name, device_us=k.device_us, count=k.count,
                      candidate=is_candidate_kernel(k.name, mine, counts, k.count))
        for k in kernels[:20]
    ]


def check_rep_evidence(evaluation: _Evaluation, done: dict, rep_index: int | None) -> None:
    """The checks that also apply to timed and profiled calls: no new thread, no tampering, nothing refused."""
    when = "during the profiled calls" if rep_index is None else f"during timed call {rep_index}"
    tampered_field, refused_field = done.get("tampered", []), done.get("refused", [])
    tampered = [str(name)[:200] for name in (tampered_field if isinstance(tampered_field, list) else [])
                if isinstance(name, str)]
    if tampered:
        evaluation.add_violation(Violation(
            ViolationCode.HARNESS_TAMPERING,
            f"{when} the candidate replaced functions the evaluator relies on: {', '.join(tampered[:8])}"))
    refused = [str(item)[:200] for item in (refused_field if isinstance(refused_field, list) else [])
               if isinstance(item, str)]
    if refused:
        evaluation.add_violation(Violation(
            ViolationCode.FORBIDDEN_CONSTRUCT,
            f"the candidate attempted operations refused at run time: {'; '.join(refused[:6])}"))
    before, after = done.get("threads_before"), done.get("threads_after")
    if isinstance(before, int) and isinstance(after, int) and after > before:
        evaluation.add_violation(Violation(
            ViolationCode.BACKGROUND_THREAD,
            f"{when} the candidate left {after - before} new thread(s) running; do all work inside the call"))

