"""Option builders shared by the ``tritongym`` subcommands (eval, run, agent, audit, serve, openenv).

Public inside the CLI package so that the sub-CLIs of the optional extras (`service.cli`,
`integrations.openenv.cli`) build the same evaluation options without importing the top CLI.
"""

from __future__ import annotations

import argparse
import sys


def device_argument(text: str) -> str:
    from tritongym.errors import OptionsError
    from tritongym.evaluator.common.device_names import parse_device

    try:
        parse_device(text)
    except OptionsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_eval_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("evaluation options")
    group.add_argument("--device", type=device_argument, default="auto", metavar="{auto,cpu,cuda,cuda:N}",
                       help="where the candidate runs: cuda when available (auto), the Triton interpreter "
                            "on the CPU (correctness only), cuda, or one GPU by index (default: %(default)s)")
    group.add_argument("--baseline", choices=("eager", "compile", "both"), default="eager",
                       help="what the candidate is timed against on a GPU: the eager reference, "
                            "torch.compile(Model), or both (speedup_vs_compile); not measured on a CPU "
                            "(default: %(default)s)")
    group.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                       help="wall-clock budget of the candidate; it is killed with its descendants on expiry "
                            "(default: %(default)s)")
    group.add_argument("--trials", type=int, default=5,
                       help="correctness trials on fresh secret draws of the task's own get_inputs(); the "
                            "perturbed input families (docs/integrity.md) add one trial each on top, so a "
                            "result lists more trials than this, each with its family (default: %(default)s)")
    group.add_argument("--tolerance", choices=("kernelbench", "strict"), default="kernelbench",
                       help="tolerance preset: kernelbench = atol=rtol=1e-2 (v0.1/KernelGYM); strict = 1e-4 "
                            "for float32, 1e-2 for half precision (default: %(default)s)")
    group.add_argument("--atol", type=float, help="absolute tolerance, overriding the preset")
    group.add_argument("--rtol", type=float, help="relative tolerance, overriding the preset")
    group.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                       help="OS sandbox of the candidate: bubblewrap when it works (auto), required (bwrap), "
                            "or none; without it every result carries a notice (default: %(default)s)")
    group.add_argument("--memory-limit-gb", type=float, default=8.0,
                       help="host-memory cap of every process of an evaluation (candidate, clean room and, on "
                            "the CPU, the reference), GiB; on the CPU the pre-flight refuses a problem whose "
                            "reference would need more (default: %(default)s)")
    group.add_argument("--seed", type=int, help="fixed master seed for reproducible debugging (inputs become "
                                                "predictable: never for training)")
    group.add_argument("--disable-check", action="append", default=[], metavar="CODE",
                       help="report this violation code as a notice instead of failing (repeatable; e.g. "
                            "forbidden_construct, which also lets the run-time policy record instead of refuse, "
                            "to test the OS sandbox alone); codes are listed in docs/integrity.md")


def add_size_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=("original", "cpu"), default=None,
                        help="problem size: KernelBench's original sizes, or the CPU-size variant (the same code "
                             "with its size constants scaled down so the reference runs in seconds; see "
                             "docs/kernelbench-cpu.md). Default: cpu when the evaluation runs on a CPU, "
                             "original on a GPU; with --server (eval, run) and --device auto, the server "
                             "decides by its device")


def resolve_size(args: argparse.Namespace, command: str) -> str:
    """The --size to use: as given, else cpu when the evaluation runs on a CPU (with a notice)."""
    if args.size:
        return args.size
    device = getattr(args, "device", "cpu")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        return "original"
    args.size_notice = True  # printed by problems_at_size when a problem is in fact scaled
    return "cpu"


def problems_at_size(problems: list, size: str, command: str, *, memory_limit_gb: float, timeout: float,
           device: str, notice: bool = False) -> tuple[list, list[tuple[str, str]]]:
    """`problems` at `size`, and (problem id, reason) for those refused: no CPU size, or (on a CPU) a
    pre-flight estimate over the memory limit or the timeout."""
    from tritongym.tasks.sizing import at_size

    sized = at_size(problems, size)
    # A problem without a CPU size can still be evaluated as published: say how, in its refusal.
    refused = [(p.problem_id, f"{reason}; to evaluate it at its published sizes: --size original")
               for p, reason in sized.refused]
    kept = sized.problems
    scaled = sum(p.size == "cpu" for p in kept)
    if notice and (scaled or refused):
        print(f"tritongym {command}: no GPU in use, so problems run at CPU size (--size cpu; {scaled} of "
              f"{len(problems)} scaled down, each result says problem_size: cpu); --size original for the "
              "published sizes", file=sys.stderr)
    for record in sized.records.values():
        if record.measured_on == "cpu" and record.status == "unchanged":  # small already: run as given, say so
            print(f"tritongym {command}: {record.problem_id} runs at its original size: {record.describe()}",
                  file=sys.stderr)
    if not str(device).startswith("cuda") and kept:
        from tritongym.tasks.preflight import preflight

        checks = preflight(kept, memory_limit_gb=memory_limit_gb, timeout=timeout, size=size)
        refused += [(p.problem_id, checks[p.problem_id].refusal) for p in kept if checks[p.problem_id].refusal]
        kept = [p for p in kept if not checks[p.problem_id].refusal]
    return kept, refused


def options_from(args: argparse.Namespace):
    from tritongym.evaluator import EvalOptions

    return EvalOptions(device=args.device, timeout=args.timeout, num_trials=args.trials,
                       tolerance=args.tolerance, atol=args.atol, rtol=args.rtol, sandbox=args.sandbox,
                       memory_limit_gb=args.memory_limit_gb, seed=args.seed,
                       disabled_checks=frozenset(args.disable_check),
                       baseline=getattr(args, "baseline", "eager"))


def first_line(text: str, limit: int = 400) -> str:
    """One readable line of an error: cut at a word boundary with an ellipsis, never mid-word."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"
