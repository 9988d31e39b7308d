"""The CPU interpreter's discarded overflow checks: one bare forward per built-in solution, with and without.

Triton's interpreter recomputes every integer ``+``/``-``/``*`` of a kernel in int64 to check for
int32 overflow (``sanitize_overflow``) and hands the result to ``device_assert``, which drops it
unless the options say ``debug``; tritongym's workers skip that work
(`interpreter_fixes._discarded_overflow_checks`). This runs each solution's forward in one process,
the setting alternating per call (checks computed, then skipped), and prints the medians and
whether the outputs were bit-identical every time.

Usage: ``python benchmarks/interpreter_overflow_checks.py [--reps 6] [NAME ...]`` (default: the
whole built-in suite; CPU, ``TRITON_INTERPRET=1`` is set here).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def load(path: Path, name: str):  # noqa: ANN201
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def flat(value):  # noqa: ANN001, ANN201
    return list(value) if isinstance(value, (list, tuple)) else [value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    from triton.runtime import interpreter

    from tritongym.evaluator.worker import interpreter_fixes

    torch.set_num_threads(1)
    interpreter_fixes.install()  # the workers' other fixes, so both columns differ in this setting only
    skipped = interpreter.interpreter_builder.options
    computed = dataclasses.replace(skipped, sanitize_overflow=True)
    names = args.names or sorted(p.stem for p in (ROOT / "examples" / "builtin").glob("[0-9]*.py"))
    print("| solution | checks computed | skipped | | outputs bit-identical |")
    print("|---|---:|---:|---:|---|")
    for name in names:
        problem = load(ROOT / "src" / "tritongym" / "tasks" / "builtin" / f"{name}.py", f"problem_{name}")
        solution = load(ROOT / "examples" / "builtin" / f"{name}.py", f"solution_{name}")
        torch.manual_seed(0)
        model = solution.ModelNew(*problem.get_init_inputs())
        inputs = problem.get_inputs()
        seconds: dict[bool, list[float]] = {True: [], False: []}
        identical = True
        for _ in range(args.reps):
            outputs = {}
            for checks in (True, False):
                interpreter.interpreter_builder.options = computed if checks else skipped
                started = time.perf_counter()
                outputs[checks] = flat(model(*inputs))
                seconds[checks].append(time.perf_counter() - started)
            identical = identical and all(torch.equal(a, b) for a, b in zip(outputs[True], outputs[False], strict=True))
        on, off = statistics.median(seconds[True]), statistics.median(seconds[False])
        print(f"| {name} | {on * 1e3:.0f} ms | {off * 1e3:.0f} ms | {on / off:.2f}× | {identical} |", flush=True)
    interpreter.interpreter_builder.options = skipped


if __name__ == "__main__":
    main()
