"""Assemble a candidate solution from Liger-Kernel's installed source, read at test time.

Liger-Kernel (https://github.com/linkedin/Liger-Kernel, BSD-2-Clause) is installed from the
package index with ``--no-deps`` (its requirements would replace this environment's CPU torch);
nothing of it is copied into this repository. A solution is one file, so the op module is
concatenated with the two helper modules it imports from its own package
(``liger_kernel.utils``, ``liger_kernel.ops.utils``), the package-relative imports are dropped (the
names they import are then defined in the same file), and a thin ``ModelNew`` written here calls
the op's forward function. No line of a kernel is edited.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

PACKAGE = "liger_kernel"
#: The version the tests were written against (installed by .ci/run).
VERSION = "0.8.5"
_PACKAGE_IMPORT = re.compile(
    r"^(from liger_kernel[\w.]* import [^\n(]*(\([^)]*\))?[^\n]*|import liger_kernel[\w.]*[^\n]*)$", re.MULTILINE)
_FUTURE = re.compile(r"^from __future__ import [^\n]*$", re.MULTILINE)


def installed_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("liger-kernel")
    except Exception:  # noqa: BLE001 - not installed
        return None


def module_source(name: str) -> str:
    """The source text of an installed module, found without importing its package."""
    root = importlib.util.find_spec(PACKAGE)
    if root is None or root.origin is None:
        raise FileNotFoundError(f"{PACKAGE} is not installed")
    path = Path(root.origin).parent.joinpath(*name.split(".")[1:])
    path = path.with_suffix(".py") if not path.is_dir() else path / "__init__.py"
    return path.read_text(encoding="utf-8")


def solution(op: str, model_new: str) -> str:
    """``liger_kernel.ops.<op>`` with its package helpers inlined, then `model_new`."""
    parts = [module_source("liger_kernel.utils"), module_source("liger_kernel.ops.utils"),
             module_source(f"liger_kernel.ops.{op}")]
    futures = sorted({line for part in parts for line in _FUTURE.findall(part)})
    body = "\n\n".join(_FUTURE.sub("", _PACKAGE_IMPORT.sub("", part)) for part in parts)
    header = f'"""Liger-Kernel {VERSION}: liger_kernel/ops/{op}.py with its package helpers, and a thin ModelNew."""\n'
    glue = "import torch\nimport torch.nn as nn\n"
    return header + "\n".join(futures) + "\n" + body + "\n\n" + glue + model_new
