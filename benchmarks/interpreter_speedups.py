"""The CPU interpreter's speed fixes, side by side: one bare forward per built-in solution.

tritongym's workers install five changes to Triton's interpreter that change no result
(`interpreter_fixes.install_speedups`): they skip the integer-overflow checks the interpreter
computes and then discards (``sanitize_overflow`` with ``debug`` off: `_discarded_overflow_checks`),
they patch ``tl`` once per namespace and launch instead of at every device-function call
(`_repeated_device_call_patches`), they look numpy dtypes up in a table built once
(`_numpy_dtype_table`), they call each builtin's implementation directly during a launch
(`_direct_builtin_calls`), they build ``block_type`` and ``tensor`` objects' shape fields from a
table, compare and broadcast shapes as ints, and skip the identity typecasts of two operands of one
type (`interpreter_types`). This runs each solution's forward in one process with every other fix
installed, the settings rotating per call (none, then one more fix at a time), and prints the
medians and whether the outputs were bit-identical every time.

Usage: ``python benchmarks/interpreter_speedups.py [--reps 6] [NAME ...]`` (default: the whole
built-in suite; CPU, ``TRITON_INTERPRET=1`` is set here).
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
SETTINGS = ("none", "overflow checks skipped", "+ tl patched once", "+ dtype table", "+ direct builtin calls",
            "+ type tables", "+ int-shape broadcasts", "+ same-type operands")


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
    from triton.language import core, semantic
    from triton.runtime import interpreter

    from tritongym.evaluator.worker import interpreter_fixes

    torch.set_num_threads(1)
    patch_once, dtype_table = interpreter_fixes._repeated_device_call_patches, interpreter_fixes._numpy_dtype_table
    interpreter_fixes._repeated_device_call_patches = interpreter_fixes._numpy_dtype_table = lambda: None
    interpreter_fixes.install()  # every other fix, so the columns differ in these settings only
    per_call_dtypes = interpreter._get_np_dtype
    dtype_table()
    table_dtypes = interpreter._get_np_dtype

    def hooks() -> tuple:
        return interpreter._patch_lang, interpreter.GridExecutor.__call__, interpreter.InterpretedFunction.__call__

    every_call = hooks()
    patch_once()
    once = hooks()
    direct = interpreter._patch_attr  # `_direct_builtin_calls`, installed by install(); read at each launch
    skipped = interpreter.interpreter_builder.options
    computed = dataclasses.replace(skipped, sanitize_overflow=True)
    owner = semantic.TritonSemantic
    tables = (core.block_type.__init__, core.tensor.__init__, owner.broadcast_impl_value,
              owner.binary_op_type_checking_impl)  # installed by install()
    no_tables = tuple(function.__wrapped__ for function in tables)

    def use(setting: str) -> None:
        position = SETTINGS.index(setting)
        interpreter.interpreter_builder.options = computed if position == 0 else skipped
        patch, launch, device_call = once if position >= 2 else every_call
        interpreter._get_np_dtype = table_dtypes if position >= 3 else per_call_dtypes
        interpreter._patch_lang = patch
        interpreter.GridExecutor.__call__ = launch
        interpreter.InterpretedFunction.__call__ = device_call
        interpreter._patch_attr = direct if position >= 4 else direct.__wrapped__
        core.block_type.__init__, core.tensor.__init__ = (tables if position >= 5 else no_tables)[:2]
        owner.broadcast_impl_value = (tables if position >= 6 else no_tables)[2]
        owner.binary_op_type_checking_impl = (tables if position >= 7 else no_tables)[3]

    names = args.names or sorted(p.stem for p in (ROOT / "examples" / "builtin").glob("[0-9]*.py"))
    print(f"| solution | {' | '.join(SETTINGS)} | none ÷ all | outputs bit-identical |")
    print("|---|" + "---:|" * (len(SETTINGS) + 1) + "---|")
    for name in names:
        problem = load(ROOT / "src" / "tritongym" / "tasks" / "builtin" / f"{name}.py", f"problem_{name}")
        solution = load(ROOT / "examples" / "builtin" / f"{name}.py", f"solution_{name}")
        torch.manual_seed(0)
        model = solution.ModelNew(*problem.get_init_inputs())
        inputs = problem.get_inputs()
        seconds: dict[str, list[float]] = {setting: [] for setting in SETTINGS}
        identical = True
        for _ in range(args.reps):
            outputs = {}
            for setting in SETTINGS:
                use(setting)
                started = time.perf_counter()
                outputs[setting] = flat(model(*inputs))
                seconds[setting].append(time.perf_counter() - started)
            identical = identical and all(torch.equal(a, b) for setting in SETTINGS[1:]
                                          for a, b in zip(outputs[SETTINGS[0]], outputs[setting], strict=True))
        medians = [statistics.median(seconds[setting]) for setting in SETTINGS]
        cells = " | ".join(f"{m * 1e3:.0f} ms" for m in medians)
        print(f"| {name} | {cells} | {medians[0] / medians[-1]:.2f}× | {identical} |", flush=True)
    use(SETTINGS[-1])


if __name__ == "__main__":
    main()
