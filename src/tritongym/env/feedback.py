"""Feedback as a policy: what the model is told about a verdict, at a chosen detail and budget.

Three levels, each with a character budget (characters, not tokens: they need no tokenizer and
are roughly 3.5-4 per token for English and code):

* ``minimal`` (default 600 chars): the status, the reward, and the one line that matters (the
  last line of the error, or the first violation).
* ``standard`` (default 2,500): the status; the error trimmed to the candidate's own lines; for
  mismatches, which output, the max absolute and relative error, the fraction of mismatched
  elements and the first mismatched position per failed trial; every violation with what to
  change; speedup and timings (GPU).
* ``full`` (default 6,000): standard, plus every trial, the Triton launches, the PyTorch compute
  ops the forward ran, and on a GPU the top kernels by device time with a coverage hint.

Never shown, at any level: expected values (they are scrubbed from the evaluator's messages),
seeds, inputs, or anything else that would let a policy fit the checker instead of the task.
When the text exceeds the budget, the error is trimmed in the middle first, then the
lowest-priority sections are dropped, and finally the text is cut with a marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritongym.evaluator.trivial import HIDDEN_BY_TOLERANCE

if TYPE_CHECKING:
    from tritongym.evaluator import EvalResult

LEVELS = ("minimal", "standard", "full")
DEFAULT_BUDGETS = {"minimal": 600, "standard": 2500, "full": 6000}

# "expected -0.0677, got -0.1355", "expected 3, got 4", "expected tensor(...), got ...": values of the
# reference's output. Shapes, dtypes and structures stay (they name the contract, not an answer).
_VALUE_PAIR = re.compile(
    r"expected (?!shape|dtype|\(|torch\.|a |an |the )[^,;\n]*, got [^;\n]*")
_FIRST_AT = re.compile(r"first at (?P<index>\([^)]*\)|\[[^\]]*\]|\S+?):")
_WORST_AT = re.compile(r"; worst at (?P<positions>.+)$")
_NONFINITE = re.compile(r"; (?P<count>\d+) of them NaN or Inf where the reference is finite")

#: What to change, per violation code; appended when the evaluator's message does not say it.
VIOLATION_HINTS = {
    "no_triton_kernel": "define at least one @triton.jit kernel and launch it from ModelNew.forward",
    "forbidden_construct": "remove introspection, process, thread, ctypes and monkeypatching code; only the "
                           "kernels and ModelNew are needed",
    "harness_tampering": "do not replace or patch torch, triton or harness functions",
    "no_triton_launch": "launch one of your own @triton.jit kernels in every forward call",
    "output_not_from_kernel": "allocate each output (torch.empty) and pass it to the kernel that writes it",
    "pytorch_fallback": "compute the task's operators in your Triton kernels instead of calling the PyTorch ops",
    "input_mutation": "do not write into the input tensors; write results into new output tensors",
    "output_aliases_input": "return new tensors, not inputs, parameters or views of them",
    "output_not_plain_tensor": "return plain torch.Tensor objects without subclasses or extra attributes",
    "trivial_output": "compute the real result; a constant, zero or pass-through output is rejected",
    "precision_downgrade": "accumulate in float32 (or the input precision); lower precision loses too much accuracy",
    "background_thread": "do not start threads; do all work inside forward",
    "timed_output_mismatch": "make every call compute the correct result, not only the first ones",
    "implausible_timing": "do not interfere with timing or synchronisation",
    "implausible_speedup": "do all the work the task requires on every call; the measured time is below what "
                           "moving the data allows",
}


def scrub_values(text: str) -> str:
    """`text` with every "expected <value>, got <value>" pair of output values withheld."""
    return _VALUE_PAIR.sub("values withheld", text)


def _trim_lines(text: str, max_chars: int) -> str:
    """Keep the head and the tail of a long text (tracebacks end with the line that matters)."""
    if len(text) <= max_chars:
        return text
    lines = text.splitlines()
    head, tail = [], []
    used = len("… [lines omitted] …") + 2
    for i in range(len(lines)):
        # Alternate tail and head, each side consecutive: lines[-1], lines[0], lines[-2], lines[1], ...
        line = lines[-1 - i // 2] if i % 2 == 0 else lines[i // 2]
        if used + len(line) + 1 > max_chars:
            break
        used += len(line) + 1
        (tail if i % 2 == 0 else head).append(line)
    if not tail:
        return text[-max_chars:]
    return "\n".join([*head, "… [lines omitted] …", *reversed(tail)])


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


@dataclass(frozen=True)
class FeedbackPolicy:
    """Renders an `EvalResult` as feedback text at `level`, within `max_chars` characters."""

    level: str = "standard"
    max_chars: int | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"feedback level must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if self.max_chars is not None and self.max_chars < 80:
            raise ValueError(f"max_chars must be at least 80, got {self.max_chars}")

    @property
    def budget(self) -> int:
        return self.max_chars if self.max_chars is not None else DEFAULT_BUDGETS[self.level]

    def render(self, result: EvalResult) -> str:
        """The feedback text for `result` (never longer than the budget)."""
        sections = self._sections(result)  # (priority, text); lower priority number = kept longer
        budget = self.budget
        text = "\n\n".join(s for _, s in sections)
        if len(text) <= budget:
            return text
        # Drop the least important sections first (highest number), keeping the order of the rest.
        kept = list(sections)
        while len("\n\n".join(s for _, s in kept)) > budget and len(kept) > 1:
            worst = max(range(len(kept)), key=lambda i: (kept[i][0], i))
            if kept[worst][0] == 0:
                break
            del kept[worst]
        text = "\n\n".join(s for _, s in kept)
        if len(text) > budget:
            marker = "\n… [feedback truncated]"
            text = text[: budget - len(marker)] + marker
        return text

    def _sections(self, result: EvalResult) -> list[tuple[int, str]]:
        status = str(result.status)
        level = self.level
        sections: list[tuple[int, str]] = []
        head = f"Status: {status} (reward {result.reward:.3g})."
        if result.correct:
            head += " Every correctness trial passed and every integrity check passed."
        sections.append((0, head))
        error = scrub_values(result.error or "")
        if level == "minimal":
            line = ""
            if result.violations:
                v = result.violations[0]
                line = f"Violation {v.code}: {scrub_values(v.message)}"
            elif error:
                line = error.strip().splitlines()[-1]
            if line:
                sections.append((0, line[: max(40, self.budget - len(head) - 4)]))
            if result.speedup is not None:
                sections.append((1, f"Speedup over the PyTorch reference: {result.speedup:.3g}x."))
            return sections
        error_budget = max(200, self.budget // 2)
        if error and not result.violations:
            sections.append((0, "Error:\n" + _trim_lines(error.strip(), error_budget)))
        for v in result.violations:
            hint = VIOLATION_HINTS.get(v.code, "")
            message = scrub_values(v.message)
            if hint and "; " not in message:  # the evaluator's messages give advice after a semicolon
                message = f"{message}. To fix: {hint}."
            sections.append((0, f"Violation {v.code}: {message}"))
        failed = [t for t in result.trials if not t.passed]
        if failed:
            lines = [f"{len(failed)} of {len(result.trials)} correctness trials failed:"]
            for t in failed[: 3 if level == "standard" else len(failed)]:
                lines.append("  " + self._trial_line(t))
            sections.append((1, "\n".join(lines)))
        if level == "full" and result.trials and not failed:
            sections.append((3, f"{len(result.trials)} correctness trials passed (families: "
                                f"{', '.join(sorted({t.family for t in result.trials}))})."))
        if result.speedup is not None or result.timing is not None:
            sections.append((1, self._timing_text(result)))
        compile_speedup = getattr(result, "speedup_vs_compile", None)
        if compile_speedup is not None:
            sections.append((1, f"Speedup over torch.compile: {compile_speedup:.3g}x."))
        if result.kernel_profile and level in ("standard", "full"):
            sections.append((2, self._profile_text(result, top=3 if level == "standard" else 8)))
        if level == "full":
            if result.triton_launches:
                launches = ", ".join(f"{k.kernel} ×{k.launches} (grid {k.last_grid})" for k in result.triton_launches
                                     if k.defined_in_candidate)
                if launches:
                    sections.append((3, f"Your Triton kernels launched: {launches}."))
            if result.torch_compute_ops:
                sections.append((2, "PyTorch compute ops your forward ran: " + ", ".join(result.torch_compute_ops)
                                 + f" (the reference runs: {', '.join(result.reference_compute_ops) or 'none'})."))
        return sections

    @staticmethod
    def _trial_line(trial) -> str:
        where = ""
        if trial.message:
            match = _FIRST_AT.search(trial.message)
            if match:
                where = f"; first mismatched position {match.group('index')}"
                nonfinite = _NONFINITE.search(trial.message)
                if nonfinite:
                    where += (f"; {nonfinite.group('count')} of them NaN or Inf where the reference is finite "
                              "(an element no kernel wrote reads NaN here)")
                worst = _WORST_AT.search(trial.message)
                if worst:
                    where += f"; worst positions {worst.group('positions')[:120]}"
            elif HIDDEN_BY_TOLERANCE in trial.message:  # wrong, although each element was within tolerance
                return f"trial {trial.index} ({trial.family}): {scrub_values(trial.message)[:600]}"
            elif "mismatch" in trial.message or "structure differs" in trial.message:
                where = "; " + scrub_values(trial.message)[:200]
        if trial.max_abs_error is None:
            detail = scrub_values(trial.message or "failed")[:200]
            return f"trial {trial.index} ({trial.family}): {detail}"
        output = trial.message.split(":", 1)[0] if trial.message and ":" in trial.message else "output"
        fraction = "n/a" if trial.mismatch_fraction is None else f"{trial.mismatch_fraction:.1%}"
        return (f"trial {trial.index} ({trial.family}): {output}: max abs error {_fmt(trial.max_abs_error)}, "
                f"max rel error {_fmt(trial.max_rel_error)}, {fraction} of elements mismatched{where}")

    @staticmethod
    def _timing_text(result) -> str:
        parts = []
        if result.speedup is not None:
            parts.append(f"Speedup over the PyTorch reference: {result.speedup:.3g}x.")
        t = result.timing
        if t is not None:
            parts.append(f"Median time: yours {t.candidate_median_ms:.4g} ms, reference {t.reference_median_ms:.4g} ms "
                         f"({t.device_name}).")
        if result.coverage is not None:
            parts.append(f"{result.coverage:.0%} of GPU time is in your own Triton kernels.")
        return " ".join(parts)

    @staticmethod
    def _profile_text(result, top: int) -> str:
        profile = sorted(result.kernel_profile, key=lambda k: k.device_us, reverse=True)
        total = sum(k.device_us for k in profile) or 1.0
        lines = ["Top kernels by GPU time:"]
        for k in profile[:top]:
            owner = "yours" if k.candidate else "PyTorch"
            lines.append(f"  {k.kernel} ({owner}): {k.device_us:.1f} us, {k.device_us / total:.0%}, ×{k.count}")
        foreign = [k for k in profile if not k.candidate]
        share = sum(k.device_us for k in foreign) / total
        if foreign and share > 0:
            names = ", ".join(dict.fromkeys(k.kernel for k in foreign[:4]))
            lines.append(f"{share:.0%} of GPU time is in PyTorch ops: {names}. Move that work into your kernels.")
        return "\n".join(lines)
