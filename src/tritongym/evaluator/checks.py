"""Named integrity checks over the evidence of one candidate forward call.

The candidate worker reports evidence (`CallEvidence`); the parent parses it strictly and runs
these checks. Each check is ``check_<property that must hold>``, returns a `Violation` or None,
and never raises for a candidate's misbehaviour. Each docstring says what it defends against,
how, and what it cannot see; docs/integrity.md has the full table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritongym.evaluator.common.channel import ProtocolError
from tritongym.evaluator.oprules import canonical_op, covers_reference, heavy_share
from tritongym.evaluator.result import Violation, ViolationCode

#: Input-derived elements a forward may read on the host (a few scalars; see `hostread`). The
#: parent applies its own copy: the worker only reports counts.
HOST_READ_BUDGET = 64
#: Longest list accepted in any evidence field (an honest worker sends far fewer items).
MAX_EVIDENCE_ITEMS = 10_000


@dataclass(frozen=True)
class LaunchEvidence:
    kernel: str
    candidate: bool
    grid: str
    compiled: str | None = None


@dataclass(frozen=True)
class OutputEvidence:
    plain: bool
    from_kernel: bool
    aliases: str | None


@dataclass(frozen=True)
class CallEvidence:
    """What the candidate worker observed around one forward call (claims, parsed strictly)."""

    launches: tuple[LaunchEvidence, ...]
    compute_ops: tuple[str, ...]
    outputs: tuple[OutputEvidence, ...]
    mutated_inputs: tuple[int, ...]
    threads_before: int
    threads_after: int
    tampered: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    compute_work: tuple[int, int] = (0, 0)
    #: elements the forward's PyTorch copies wrote in a new layout, and in a new dtype (`optrace.op_moves`)
    moved_elements: tuple[int, int] = (0, 0)
    host_read_elements: int = 0
    host_read_examples: tuple[str, ...] = ()
    kernel_findings: tuple[str, ...] = ()
    foreign_thread_launches: int = 0
    #: ``(kernel, config, index, of)`` for each autotuned kernel the call ran.
    autotune: tuple[tuple[str, str, int, int], ...] = ()

    @classmethod
    def parse(cls, data: Any) -> CallEvidence:
        """Validate the worker's JSON; anything malformed is a `ProtocolError` (a crash verdict)."""
        try:
            if not isinstance(data, dict):
                raise TypeError(f"evidence must be an object, got {type(data).__name__}")
            launches = tuple(
                LaunchEvidence(kernel=_str(item["kernel"]), candidate=_bool(item["candidate"]), grid=_str(item["grid"]),
                               compiled=None if item.get("compiled") is None else _str(item["compiled"]))
                for item in _list(data["launches"])
            )
            host_reads = _list(data.get("host_reads", [0, []]))
            if len(host_reads) != 2:
                raise TypeError("host_reads must be [elements, examples]")
            outputs = tuple(
                OutputEvidence(plain=_bool(item["plain"]), from_kernel=_bool(item["from_kernel"]),
                               aliases=None if item["aliases"] is None else _str(item["aliases"]))
                for item in _list(data["outputs"])
            )
            return cls(
                launches=launches,
                compute_ops=tuple(_str(op) for op in _list(data["compute_ops"])),
                outputs=outputs,
                mutated_inputs=tuple(_int(i) for i in _list(data["mutated_inputs"])),
                threads_before=_int(data["threads_before"]),
                threads_after=_int(data["threads_after"]),
                tampered=tuple(_str(name) for name in _list(data.get("tampered", []))),
                refused=tuple(_str(name) for name in _list(data.get("refused", []))),
                compute_work=_work(_list(data.get("compute_work", [0, 0]))),
                moved_elements=_pair(_list(data.get("moved_elements", [0, 0])), "moved_elements"),
                host_read_elements=_count(host_reads[0]),
                host_read_examples=tuple(_str(e) for e in _list(host_reads[1])[:8]),
                kernel_findings=tuple(_str(f) for f in _list(data.get("kernel_findings", []))[:20]),
                foreign_thread_launches=_count(data.get("foreign_thread_launches", 0)),
                autotune=tuple((_str(item["kernel"]), _str(item["config"]), _count(item["index"]), _count(item["of"]))
                               for item in _list(data.get("autotune", []))[:64]),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ProtocolError(f"malformed call evidence: {type(exc).__name__}: {str(exc)[:300]}") from None


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    if len(value) > MAX_EVIDENCE_ITEMS:
        raise TypeError(f"a list of {len(value)} items exceeds {MAX_EVIDENCE_ITEMS}")
    return value


def _count(value: Any) -> int:
    number = _int(value)
    if not 0 <= number < 1 << 62:
        raise TypeError(f"a count out of range: {number}")
    return number


def _work(values: list[Any]) -> tuple[int, int]:
    return _pair(values, "compute_work")


def _pair(values: list[Any], name: str) -> tuple[int, int]:
    """``[a, b]`` of counts: compute work ``[elements, flops]``, moves ``[layout, dtype]``."""
    if len(values) != 2:
        raise TypeError(f"{name} must be two counts")
    return _count(values[0]), _count(values[1])


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value[:500]


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    return value


def check_triton_launched(evidence: CallEvidence) -> Violation | None:
    """Every forward launches at least one kernel defined in the candidate's own source.

    Defends against: decoy kernels defined but never launched, ``if self.training`` ghost
    branches, try/except fallbacks, kernels borrowed from other files (reward-hacking A2, A3, A5).
    How: the launch hook records each launch's defining file; run on every trial.
    Residual risk: one trivial launch satisfies it; `check_output_from_kernel` and
    `check_no_pytorch_fallback` close the "launch something, compute in PyTorch" route.
    """
    if any(launch.candidate for launch in evidence.launches):
        return None
    others = sorted({launch.kernel for launch in evidence.launches})
    seen = f" (it launched only kernels defined elsewhere: {', '.join(others)})" if others else ""
    return Violation(
        ViolationCode.NO_TRITON_LAUNCH,
        f"the forward launched no Triton kernel defined in the solution{seen}; every forward must do "
        "its work in the solution's own @triton.jit kernels",
    )


def check_output_from_kernel(evidence: CallEvidence) -> Violation | None:
    """Every returned tensor was written by a candidate kernel, or computed by glue from such data.

    Defends against: launching a kernel on a dummy tensor while returning a PyTorch result (A1).
    How: the worker compares each output's storage span with the argument storages of the
    candidate's launches in that call, and follows the data (`optrace.DataFlow`): an output that
    torch ops computed from storage a candidate kernel wrote (a final ``sum`` of per-row partial
    results) is the kernels' output; how much work that glue did is the fallback rule's to judge.
    Residual risk: a kernel that receives the output but does not write all of it passes this
    check; correctness on fresh secret inputs catches outputs that are not computed.
    """
    for index, output in enumerate(evidence.outputs):
        if not output.from_kernel:
            return Violation(
                ViolationCode.OUTPUT_NOT_FROM_KERNEL,
                f"output {index} was not written by any of the solution's Triton kernels (its storage was "
                "never a kernel argument); allocate the output and pass it to the kernel that computes it",
            )
    return None


def check_no_pytorch_fallback(evidence: CallEvidence, reference_ops: list[str],
                              reference_work: tuple[int, int] = (0, 0),
                              reference_moved: tuple[int, int] = (0, 0)) -> Violation | None:
    """The forward does not do the reference's work in PyTorch (a fallback).

    Defends against: ``forward`` calling ``torch.matmul``, ``F.*``, Tensor methods, ``@``, or the
    reference model itself, around or instead of Triton kernels (A1); the same work spelled with
    other ops (``where``/``mul`` for ``relu``, a broadcast multiply and sum for a matmul); keeping
    the heavy op (the GEMM) in PyTorch and writing only the epilogue in Triton (A4).
    How: `optrace.OpTrace` records the ATen compute ops the forward dispatches outside Triton
    launches. A fallback when they include every compute op of the reference (mm/addmm/matmul
    ... compared as one family), or when their work reaches the reference's: as many output
    elements as the whole reference computation, or half its matmul/convolution FLOPs; for a
    reference that only moves data (no compute op), as many elements copied into a new layout
    or dtype as the reference's copies (`oprules.heavy_share`).
    Residual risk: a candidate that moves a small share of the work to PyTorch passes; GPU-time
    coverage (PR/PRS) measures how much of the work its kernels do.
    """
    if covers_reference(list(evidence.compute_ops), reference_ops):
        shared = sorted({canonical_op(op) for op in reference_ops})
        return Violation(
            ViolationCode.PYTORCH_FALLBACK,
            f"the forward ran every compute op of the reference in PyTorch ({', '.join(shared)}); "
            "compute them in the solution's Triton kernels instead",
        )
    why = heavy_share(evidence.compute_work, reference_work, evidence.moved_elements, reference_moved)
    if why is not None:
        return Violation(ViolationCode.PYTORCH_FALLBACK,
                         f"the forward did the reference's work in PyTorch: {why}; do it in Triton kernels")
    return None


def check_inputs_unchanged(evidence: CallEvidence) -> Violation | None:
    """The forward leaves its inputs bit-for-bit unchanged.

    Defends against: zeroing or rewriting inputs so that a later check sees a different
    problem (B8). The reference never shares the candidate's tensors here, so this is reported
    for honesty of the kernel rather than to protect the comparison.
    How: the worker compares each input tensor's bytes with a copy taken before the call.
    """
    if evidence.mutated_inputs:
        which = ", ".join(str(i) for i in evidence.mutated_inputs)
        return Violation(ViolationCode.INPUT_MUTATION,
                         f"the forward modified input tensor(s) {which}; write results to a new output tensor")
    return None


def check_output_not_aliased(evidence: CallEvidence) -> Violation | None:
    """No output shares storage with an input or a parameter.

    Defends against: returning the input or a view of it (identity hacks where the task is the
    identity on the test distribution), persistent parameter buffers as outputs (B2, B7).
    How: storage-span overlap between each output and every input, parameter and buffer.
    """
    for index, output in enumerate(evidence.outputs):
        if output.aliases:
            return Violation(ViolationCode.OUTPUT_ALIASES_INPUT,
                             f"output {index} shares memory with an {output.aliases}; return a new tensor")
    return None


def check_output_plain(evidence: CallEvidence) -> Violation | None:
    """Every output is exactly ``torch.Tensor`` with no instance attributes.

    Defends against: lazy tensors and Tensor subclasses that defer or fake work, and instance
    overrides such as ``out.cpu = lambda: ...`` (D3).
    How: ``type(out) is torch.Tensor and not out.__dict__``; outputs are also rebuilt through
    class-level calls before they are sent, so an override cannot change what the parent sees.
    """
    for index, output in enumerate(evidence.outputs):
        if not output.plain:
            return Violation(ViolationCode.OUTPUT_NOT_PLAIN_TENSOR,
                             f"output {index} is not a plain torch.Tensor (a subclass or instance attributes)")
    return None


def check_no_background_thread(evidence: CallEvidence) -> Violation | None:
    """The forward leaves no new Python thread running.

    Defends against: returning a placeholder while a thread finishes the work later, outside
    the timed or checked window (D2, C3).
    How: ``threading.active_count()`` before the candidate was imported and after the call (a
    thread started at import or build time counts too), and launches of the candidate's kernels
    from a thread other than the forward's.
    Residual risk: native threads started through C extensions are not counted; the static gate
    bans ``threading``, ``ctypes`` and friends, and outputs are read after a device-wide sync.
    """
    if evidence.foreign_thread_launches:
        return Violation(ViolationCode.BACKGROUND_THREAD,
                         f"{evidence.foreign_thread_launches} kernel launch(es) came from another thread; do all "
                         "work inside the call, on its own thread")
    if evidence.threads_after > evidence.threads_before:
        return Violation(ViolationCode.BACKGROUND_THREAD,
                         f"the forward started {evidence.threads_after - evidence.threads_before} thread(s) that "
                         "were still running when it returned; do all work inside the call")
    return None


def check_harness_untouched(evidence: CallEvidence) -> Violation | None:
    """No function the harness relies on, or a cheat would patch, has been replaced.

    Defends against: monkeypatching ``torch.allclose``, timers (``time.perf_counter``,
    ``torch.cuda.Event.elapsed_time``), ``torch.cuda.synchronize``, the launch hook or the
    worker's own functions (D4, E3). The comparison never happens in this process and the timer
    uses references captured before the candidate was imported, so such patches gain nothing;
    this check names them.
    How: the worker records each watched function's identity before importing the candidate and
    compares after every call.
    Residual risk: a candidate that can patch the check itself can hide a patch; the static gate
    forbids the vocabulary needed (module attribute assignment, ``setattr``, ``sys.modules``).
    """
    if evidence.tampered:
        shown = ", ".join(evidence.tampered[:8])
        return Violation(ViolationCode.HARNESS_TAMPERING,
                         f"the candidate replaced functions the evaluator relies on: {shown}")
    return None


def check_nothing_refused(evidence: CallEvidence) -> Violation | None:
    """The candidate attempted nothing the run-time policy refuses.

    Defends against: the forbidden vocabulary reached past the static gate by aliasing or
    string-built names (``len.__self__``, ``getattr(m, "g" + "c")``): heap and stack walks,
    tracing, code from strings, code replacement, forbidden imports, ctypes, processes, signals,
    files, sockets (E1–E5, B10, D2, D4, D5).
    How: `audit_policy` (a PEP 578 audit hook the candidate cannot remove) refuses those events
    when the candidate's own frame is responsible, and records them.
    """
    if evidence.refused:
        shown = "; ".join(evidence.refused[:6])
        return Violation(ViolationCode.FORBIDDEN_CONSTRUCT,
                         f"the candidate attempted operations refused at run time: {shown}")
    return None


def check_no_host_compute(evidence: CallEvidence, budget: int = HOST_READ_BUDGET) -> Violation | None:
    """The candidate's Python reads no more than a few input-derived values on the host.

    Defends against: computing the answer (or part of it, e.g. a softmax's normalisation) on the
    host with numpy on ``x.numpy()`` or plain Python over ``x.tolist()``/``.item()`` and handing it
    to a copy kernel; on a GPU the same through a device-to-host copy. Neither numpy nor Python
    arithmetic is an ATen op, so the op trace cannot see the work; every such route must first
    bring the input's values to host code, which is what is counted.
    How: `hostread.HostReadTrace` counts the elements of input-derived tensors (`optrace.DataFlow`)
    whose values the candidate's own frames read (``numpy``, ``__array__``, ``tolist``, ``item``,
    ``__float__``, printing, pickling, storage and raw-pointer access); the op trace adds
    device-to-host copies. More than `budget` elements in one forward is a violation.
    Residual risk: reads made with torch-function handling switched off through torch's private
    switches (named by the static gate; see docs/integrity.md "Evidence").
    """
    if evidence.host_read_elements <= budget:
        return None
    shown = "; ".join(evidence.host_read_examples[:3])
    return Violation(
        ViolationCode.HOST_COMPUTE,
        f"the forward read {evidence.host_read_elements} input-derived values on the host (budget {budget}: "
        f"{shown}); compute in Triton kernels on the device, not in numpy or Python on the host",
    )


def check_kernels_are_triton(evidence: CallEvidence) -> Violation | None:
    """Kernel bodies refer only to Triton, and kernels receive only tensors, scalars and constexprs.

    Defends against: a "kernel" whose body calls a plain Python helper (or receives a Python
    object or combine function) that does the work in torch or numpy: the CPU interpreter runs
    it as Python; a GPU would refuse to compile it (A1 on the CPU tier; red-team finding 1).
    How: `kernels.BodyChecker` resolves every global a kernel body names in the kernel's own
    namespace at run time (aliases resolve to what they are), and the launch hook checks each
    argument's type (`kernels.describe_foreign_argument`).
    """
    if not evidence.kernel_findings:
        return None
    return Violation(ViolationCode.PYTHON_IN_KERNEL, "; ".join(evidence.kernel_findings[:3]))


def run_call_checks(evidence: CallEvidence, reference_ops: list[str],
                    reference_work: tuple[int, int] = (0, 0),
                    reference_moved: tuple[int, int] = (0, 0)) -> list[Violation]:
    """All per-call checks, in a fixed order."""
    found = [
        check_nothing_refused(evidence),
        check_harness_untouched(evidence),
        check_no_background_thread(evidence),
        check_kernels_are_triton(evidence),
        check_triton_launched(evidence),
        check_output_from_kernel(evidence),
        check_no_host_compute(evidence),
        check_no_pytorch_fallback(evidence, reference_ops, reference_work, reference_moved),
        check_inputs_unchanged(evidence),
        check_output_not_aliased(evidence),
        check_output_plain(evidence),
    ]
    return [v for v in found if v is not None]
