"""The measurement phases of an evaluation: timing (interleaved, rechecked) and profiling.

They run after the correctness trials, only for candidates that passed them, and only where the
figures mean something (a GPU; timing also on a CPU with ``time_on_cpu`` for protocol tests).
The rules that bound what the candidate worker reports are in `plausibility`; the worker side
is `timing.TimingSession` and `profiling.profile_forward`.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from typing import TYPE_CHECKING

from tritongym.evaluator import plausibility, profiling
from tritongym.evaluator.channel import ChannelClosed, ProtocolError
from tritongym.evaluator.compare import compare_outputs
from tritongym.evaluator.reference import ReferenceRunner
from tritongym.evaluator.result import KernelProfile, Status, TimingReport, Violation, ViolationCode
from tritongym.evaluator.session import CandidateFailed, WorkerHandle

if TYPE_CHECKING:
    from tritongym.evaluator.parent import _Evaluation


def run_timing(evaluation: _Evaluation, reference: ReferenceRunner, candidate: WorkerHandle) -> None:
    """Time reference and candidate in interleaved blocks; recheck secret timed outputs."""
    options = evaluation.options
    phase = "timing warm-up"
    try:
        ref_ready = reference.request("time_start", {"warmup_ms": options.warmup_ms}, "time_ready")
        evaluation._expect(candidate.request("time_start", {"warmup_ms": options.warmup_ms}), "time_ready", phase)
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
                # A repetition's round trip spans rep and drop/keep, on both sides alike.
                sent = time.perf_counter()
                done = reference.request("rep", {"seed": evaluation.seed_source()}, "rep_done")
                reference.request("drop", {}, "dropped")
                samples["ref_rt"].append((time.perf_counter() - sent) * 1e3)
                samples["ref"].append(float(done["ms"]))
                samples["ref_host"].append(float(done["host_ms"]))
            for _ in range(size):
                seed = evaluation.seed_source()
                sent = time.perf_counter()
                done = evaluation._expect(candidate.request("rep", {"seed": seed}), "rep_done", phase)
                ms, host_ms = done.get("ms"), done.get("host_ms")
                if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                           for v in (ms, host_ms)):
                    evaluation.add_violation(Violation(
                        ViolationCode.IMPLAUSIBLE_TIMING,
                        f"a timed call reported {ms!r} ms (host {host_ms!r} ms); times must be positive"))
                    return
                samples["cand"].append(float(ms))
                samples["cand_host"].append(float(host_ms))
                _check_rep_evidence(evaluation, done, rep_index)
                if rep_index in rechecked:
                    kept = evaluation._expect(candidate.request("keep", {}), "output", phase)
                    samples["cand_rt"].append((time.perf_counter() - sent) * 1e3)
                    expected = reference.request("expected_for", {"seed": seed}, "expected")
                    comparison = compare_outputs(expected["expected"], kept.get("outputs"),
                                                 evaluation.options.tolerance_for)
                    if not comparison.passed:
                        evaluation.add_violation(Violation(
                            ViolationCode.TIMED_OUTPUT_MISMATCH,
                            f"the output of timed call {rep_index} did not match the reference "
                            f"({comparison.message}); outputs must be computed on every call"))
                else:
                    evaluation._expect(candidate.request("drop", {}), "dropped", phase)
                    samples["cand_rt"].append((time.perf_counter() - sent) * 1e3)
                rep_index += 1
    except TimeoutError as exc:
        raise CandidateFailed(Status.TIMEOUT, f"the candidate exceeded the {evaluation.options.timeout:g} s "
                                              f"budget during {phase}") from exc
    except (ChannelClosed, ProtocolError) as exc:
        reason = candidate.process.wait_exit(grace=2.0)
        raise CandidateFailed(Status.CRASHED, f"the candidate process stopped answering during {phase} "
                                              f"({reason}): {exc}") from exc
    meaningful = evaluation.device == "cuda"
    candidate_median = statistics.median(samples["cand"])
    estimate = plausibility.wall_clock_estimate_ms(samples["cand_rt"], samples["ref_rt"], samples["ref"])
    if not plausibility.wall_clock_consistent(samples["cand"], estimate):
        evaluation.add_violation(Violation(
            ViolationCode.IMPLAUSIBLE_TIMING,
            f"the candidate reported a median of {candidate_median:.4g} ms per call, but the evaluator's own "
            f"clock puts it at about {estimate:.4g} ms; reported times must be real"))
    floor_ms = bandwidth = None
    if meaningful:
        bandwidth = float(reference.request("bandwidth", {}, "bandwidth")["bytes_per_s"])
        floor_ms = plausibility.physics_floor_ms(evaluation.bytes_moved, bandwidth)
        if candidate_median < floor_ms:
            evaluation.add_violation(Violation(
                ViolationCode.IMPLAUSIBLE_SPEEDUP,
                f"a median of {candidate_median:.4g} ms per call is faster than moving the task's "
                f"{evaluation.bytes_moved / 1e6:.3g} MB allows at this device's measured bandwidth "
                f"({bandwidth / 1e9:.0f} GB/s, floor {floor_ms:.4g} ms)"))
    evaluation.timing = TimingReport(
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

def run_profile(evaluation: _Evaluation, candidate: WorkerHandle) -> None:
    """Coverage: the share of GPU time spent in the candidate's own Triton kernels."""
    try:
        reply = evaluation._expect(candidate.request("profile", {"calls": evaluation.options.profile_calls}),
                             "profiled", "profiling")
        kernels = [profiling.KernelTime(str(name), float(us), int(count)) for name, us, count in reply["kernels"]]
        mine = [str(name) for name in reply["candidate_kernels"]]
    except TimeoutError as exc:
        raise CandidateFailed(Status.TIMEOUT, f"the candidate exceeded the {evaluation.options.timeout:g} s "
                                              "budget during profiling") from exc
    except (ChannelClosed, ProtocolError, KeyError, TypeError, ValueError) as exc:
        reason = candidate.process.wait_exit(grace=2.0)
        raise CandidateFailed(Status.CRASHED, f"the candidate broke the profiling protocol ({reason}): "
                                              f"{exc}") from exc
    evaluation.coverage = profiling.coverage_from_kernels(kernels, mine)
    evaluation.kernel_profile = [
        KernelProfile(kernel=k.name, device_us=k.device_us, count=k.count,
                      candidate=profiling.is_candidate_kernel(k.name, mine))
        for k in kernels[:20]
    ]


def _check_rep_evidence(evaluation: _Evaluation, done: dict, rep_index: int) -> None:
    """The checks that also apply to timed calls: no new thread, no tampering, nothing refused."""
    tampered = [str(name)[:200] for name in done.get("tampered", []) if isinstance(name, str)]
    if tampered:
        evaluation.add_violation(Violation(
            ViolationCode.HARNESS_TAMPERING,
            f"during timed call {rep_index} the candidate replaced functions the evaluator relies on: "
            f"{', '.join(tampered[:8])}"))
    refused = [str(item)[:200] for item in done.get("refused", []) if isinstance(item, str)]
    if refused:
        evaluation.add_violation(Violation(
            ViolationCode.FORBIDDEN_CONSTRUCT,
            f"the candidate attempted operations refused at run time: {'; '.join(refused[:6])}"))
    before, after = done.get("threads_before", 0), done.get("threads_after", 0)
    if isinstance(before, int) and isinstance(after, int) and after > before:
        evaluation.add_violation(Violation(
            ViolationCode.BACKGROUND_THREAD,
            f"timed call {rep_index} left {after - before} new thread(s) running; do all work inside the call"))
