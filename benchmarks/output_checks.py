"""The parent's checks of one trial's outputs at KernelBench sizes, on the CPU.

For every trial a candidate passes, the trusted parent compares its outputs with the reference's
(`compare.compare_outputs`), and on a perturbed-family trial also reviews them against trivial
outputs and a float64 evaluation (`trivial.review_family_trial`), then checks them against trivial
outputs again and for precision (`trivial.check_beats_trivial`, `trivial.check_precision`), all
in float64. At KernelBench's sizes (16M elements and more) these ran for seconds per trial; this
times the whole sequence on one output of ``--rows x --cols`` float32 elements, as
`parent._Evaluation.record_call` runs it (in one `compare.shared_float64` block), on one thread.

Usage: ``python benchmarks/output_checks.py [--rows 4096] [--cols 4096] [--repeats 5]``;
prints the median seconds per trial (docs/benchmarks.md, "The parent's output checks").
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tritongym.evaluator import trivial
from tritongym.evaluator.compare import compare_outputs, shared_float64
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.reference import ReferenceTrial


def check_one_trial(trial: ReferenceTrial, actual: torch.Tensor, options: EvalOptions) -> float:
    """Seconds for the parent's checks of one passing family trial (asserts they all pass)."""
    started = time.perf_counter()
    with shared_float64():
        comparison = compare_outputs(trial.expected, actual, options.tolerance_for)
        comparison = trivial.review_family_trial(comparison, trial, actual, options)
        trivial_output = trivial.check_beats_trivial(trial.expected, actual, trial.inputs, None,
                                                     options.trivial_margin)
        precision = trivial.check_precision(trial.expected, actual, trial.truth, options.precision_factor,
                                            options.precision_floor)
    elapsed = time.perf_counter() - started
    if not comparison.passed or trivial_output is not None or precision is not None:
        raise AssertionError(f"an honest output failed a check: {comparison}, {trivial_output}, {precision}")
    return elapsed


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(args.rows, args.cols), torch.randn(args.cols)
    expected = 2.0 * x + 3.0 * y  # the task: 2x + 3y, an honest output a rounding away from it
    actual = expected + 1e-7 * torch.randn_like(expected)
    trial = ReferenceTrial(family="scaled", inputs=[x, y], expected=expected, compute_ops=["aten::add"],
                           finite=True, truth=2.0 * x.double() + 3.0 * y.double())
    seconds = [check_one_trial(trial, actual, EvalOptions(device="cpu")) for _ in range(args.repeats)]
    median = statistics.median(seconds)
    print(f"{args.rows}x{args.cols} float32 output: {median:.3f} s per trial (median of {args.repeats}, "
          f"1 thread)")
    return median


if __name__ == "__main__":
    main()
