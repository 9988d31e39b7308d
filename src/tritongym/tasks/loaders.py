"""Loaders that turn files and datasets into `Problem` objects.

Supported sources:

* one ``.py`` file in KernelBench format (`load_problem_file`);
* a KernelBench checkout or its ``KernelBench/`` folder, with ``level1/19_ReLU.py`` … files
  (`load_kernelbench_dir`);
* rows in the Hugging Face KernelBench layout (columns ``code``, ``level``, ``name``,
  ``problem_id``) from JSONL or Parquet files (`load_hf_rows`), or from the `datasets` library
  when it is installed (`load_hf_dataset`); a hub id such as ``ScalingIntelligence/KernelBench``
  is downloaded once and then read from a local snapshot (`load_hub_dataset`);
* the built-in suite shipped with tritongym (`builtin_suite`).

`load_problems(spec)` resolves any of these from one string, which is what the CLI uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from tritongym.errors import DependencyError, ProblemError
from tritongym.tasks.problem import Problem

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_NUMBERED = re.compile(r"^(\d+)_")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ProblemError(f"problem file not found: {path}") from exc
    except UnicodeDecodeError as exc:
        raise ProblemError(f"problem file {path} is not UTF-8 text") from exc


def load_problem_file(path: str | Path, *, level: int | None = None, problem_id: str | None = None) -> Problem:
    """Load one KernelBench-format ``.py`` file.

    The level defaults to the parent folder's ``levelN`` name when there is one.
    """
    path = Path(path)
    if path.is_dir():
        raise ProblemError(f"{path} is a directory; use load_kernelbench_dir for a folder of problems")
    if level is None:
        match = _LEVEL_DIR.match(path.parent.name)
        level = int(match.group(1)) if match else None
    name = path.stem
    if problem_id is None:
        # The same id load_kernelbench_dir and the Hugging Face loaders give the same problem.
        prefix = _NUMBERED.match(path.name)
        if level is not None:
            problem_id = f"kernelbench/level{level}/{prefix.group(1) if prefix else name}"
        else:
            problem_id = name
    return Problem(source=_read_text(path), name=name, problem_id=problem_id, level=level, origin=str(path))


def _sort_key(path: Path) -> tuple[int, str]:
    match = _NUMBERED.match(path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


def load_kernelbench_dir(root: str | Path, levels: Iterable[int] | None = None) -> list[Problem]:
    """Load every problem of a KernelBench-layout folder.

    `root` may be a KernelBench checkout (``KernelBench/level1/...`` inside it), the
    ``KernelBench`` folder itself (``level1/``, ``level2/`` …), or one ``levelN`` folder. Problems
    come back ordered by level, then by their numeric prefix. Ids look like
    ``kernelbench/level1/19``.
    """
    root = Path(root)
    if not root.is_dir():
        raise ProblemError(f"not a directory: {root}")
    if (root / "KernelBench").is_dir():
        root = root / "KernelBench"
    level_dirs: list[tuple[int, Path]] = []
    match = _LEVEL_DIR.match(root.name)
    if match:
        level_dirs.append((int(match.group(1)), root))
    else:
        for child in sorted(root.iterdir()):
            child_match = _LEVEL_DIR.match(child.name)
            if child.is_dir() and child_match:
                level_dirs.append((int(child_match.group(1)), child))
    if not level_dirs:
        raise ProblemError(f"{root} holds no levelN/ folders; expected a KernelBench layout")
    wanted = set(levels) if levels is not None else None
    problems: list[Problem] = []
    for level, folder in sorted(level_dirs):
        if wanted is not None and level not in wanted:
            continue
        for path in sorted(folder.glob("*.py"), key=_sort_key):
            prefix = _NUMBERED.match(path.name)
            number = prefix.group(1) if prefix else path.stem
            problems.append(
                load_problem_file(path, level=level, problem_id=f"kernelbench/level{level}/{number}")
            )
    return problems


def load_problem_folder(root: str | Path) -> list[Problem]:
    """Every problem ``.py`` file directly in a plain folder (no ``levelN/`` layout), by file name.

    Ids are the file stems (``my_problems/softmax.py`` → ``softmax``); files starting with ``_``
    are skipped.
    """
    root = Path(root)
    paths = sorted((p for p in root.glob("*.py") if not p.name.startswith("_")), key=_sort_key)
    if not paths:
        raise ProblemError(f"{root} holds no problem .py files and no levelN/ folders (a KernelBench layout)")
    return [load_problem_file(path) for path in paths]


def _is_kernelbench_layout(root: Path) -> bool:
    if (root / "KernelBench").is_dir() or _LEVEL_DIR.match(root.name):
        return True
    return any(child.is_dir() and _LEVEL_DIR.match(child.name) for child in root.iterdir())


def problem_from_row(row: Mapping[str, Any], *, origin: str | None = None) -> Problem:
    """Build a problem from one row in the Hugging Face KernelBench layout.

    Required column: ``code``. Optional: ``level``, ``name`` (e.g. ``19_ReLU.py``) and
    ``problem_id``. The id becomes ``kernelbench/level{level}/{problem_id}``.
    """
    if not isinstance(row, Mapping):
        raise ProblemError(f"row {origin or ''} is a {type(row).__name__}, not an object with a 'code' column")
    if "code" not in row or not isinstance(row["code"], str):
        raise ProblemError(
            f"row {origin or ''} has no text column 'code'; expected the Hugging Face KernelBench "
            f"layout (code, level, name, problem_id), got columns {sorted(row)}"
        )
    level = row.get("level")
    try:
        level = int(level) if level is not None else None
    except (TypeError, ValueError) as exc:
        raise ProblemError(f"row {origin or ''}: 'level' must be an integer, got {level!r}") from exc
    raw_name = str(row.get("name") or row.get("problem_id") or "problem")
    name = raw_name[:-3] if raw_name.endswith(".py") else raw_name
    number = row.get("problem_id")
    if number is None:
        prefix = _NUMBERED.match(name)
        number = prefix.group(1) if prefix else name
    problem_id = f"kernelbench/level{level}/{number}" if level is not None else f"kernelbench/{number}"
    return Problem(source=row["code"], name=name, problem_id=problem_id, level=level, origin=origin)


def _level_wanted(row: Any, wanted: set[int] | None) -> bool:
    if wanted is None or not isinstance(row, Mapping):
        return True  # malformed rows reach problem_from_row, which says what is wrong
    try:
        return row.get("level") is not None and int(row["level"]) in wanted
    except (TypeError, ValueError):
        return True


def load_hf_rows(
    source: str | Path | Iterable[Mapping[str, Any]], levels: Iterable[int] | None = None
) -> list[Problem]:
    """Load rows in the Hugging Face KernelBench layout.

    `source` is a ``.jsonl`` file, a ``.parquet`` file (needs `pyarrow`: ``pip install -e
    '.[data]'`` from the clone), or an iterable of row mappings (for instance a `datasets.Dataset`).
    """
    rows: list[Mapping[str, Any]]
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ProblemError(f"dataset file not found: {path}")
        if path.suffix == ".jsonl":
            rows = []
            origins = []
            with path.open(encoding="utf-8") as handle:
                for line_number, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ProblemError(f"{path}:{line_number}: not a JSON object: {exc.msg}") from exc
                    if not isinstance(row, dict):
                        raise ProblemError(f"{path}:{line_number}: expected a JSON object, got {type(row).__name__}")
                    rows.append(row)
                    origins.append(f"{path}:{line_number}")
        elif path.suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError as exc:
                raise DependencyError(
                    "reading Parquet needs pyarrow: from the clone: pip install -e '.[data]'"
                ) from exc
            rows = pq.read_table(path).to_pylist()
            origins = [f"{path}: row {i}" for i in range(len(rows))]
        else:
            raise ProblemError(f"{path}: expected a .jsonl or .parquet file")
    else:
        rows = list(source)
        origins = [f"row {i}" for i in range(len(rows))]
    wanted = set(levels) if levels is not None else None
    return [
        problem_from_row(row, origin=origin)
        for row, origin in zip(rows, origins, strict=True)
        if _level_wanted(row, wanted)
    ]


#: The Hugging Face dataset of KernelBench's problems (splits ``level_1`` … ``level_4``; columns
#: ``code``, ``level``, ``name``, ``problem_id``).
KERNELBENCH_HUB_ID = "ScalingIntelligence/KernelBench"
#: ``owner/name``: how a Hugging Face dataset id is spelled (``ScalingIntelligence/KernelBench``).
_HUB_ID = re.compile(r"^(?:hf:)?([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)$")
_DATASETS_HINT = ("pip install datasets (from the clone: pip install -e '.[data]'), or give a local copy: a "
                  "KernelBench clone's folder or a .jsonl/.parquet file")


def load_hf_dataset(
    name: str = KERNELBENCH_HUB_ID, levels: Iterable[int] | None = None, **kwargs: Any
) -> list[Problem]:
    """Load KernelBench through Hugging Face `datasets` (``pip install -e '.[data]'``).

    The hub dataset has one split per level (``level_1`` …); every split found is read unless
    `levels` narrows them. Extra keyword arguments go to `datasets.load_dataset` (``cache_dir``,
    ``revision``, ``data_files`` …). A missing `datasets` raises `DependencyError`; a dataset that
    cannot be fetched (offline, a wrong name) raises `ProblemError` saying why and what to do.
    """
    try:
        import datasets
    except ImportError as exc:
        raise DependencyError(f"loading the Hugging Face dataset {name} needs the datasets library: "
                              f"{_DATASETS_HINT}") from exc
    try:
        loaded = datasets.load_dataset(name, **kwargs)
    except ConnectionError as exc:  # offline, or the hub unreachable (datasets raises this after its retries)
        raise ProblemError(
            f"could not download the Hugging Face dataset {name} (offline or the hub is unreachable: {exc}); "
            f"download it once with network access (it is cached afterwards), or give a local copy: a "
            f"KernelBench clone's folder or a .jsonl/.parquet file") from exc
    except Exception as exc:  # noqa: BLE001 - datasets raises many types (not found, gated, bad files)
        raise ProblemError(f"could not load the Hugging Face dataset {name}: {type(exc).__name__}: {exc}") from exc
    splits = loaded.values() if hasattr(loaded, "values") else [loaded]
    problems: list[Problem] = []
    for split in splits:
        problems.extend(load_hf_rows(split, levels=levels))
    return problems


def is_hub_id(spec: str | Path) -> bool:
    """True for ``owner/name`` (or ``hf:owner/name``) that is not a path on this machine."""
    text = str(spec)
    return bool(_HUB_ID.match(text)) and not Path(text).exists() and Path(text).suffix not in (".py", ".jsonl",
                                                                                               ".parquet")


def cache_root() -> Path:
    """tritongym's cache: ``$TRITONGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/tritongym``, else
    ``~/.cache/tritongym`` (hub snapshots in ``datasets/``, the meta-device size estimates the pre-flight and the CPU
    sizing share in ``sizes/``)."""
    import os

    root = os.environ.get("TRITONGYM_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tritongym"


def dataset_cache_dir() -> Path:
    """Where hub datasets are kept after their first download: `cache_root` ``/ "datasets"``."""
    return cache_root() / "datasets"


def hub_snapshot_path(name: str, snapshot_dir: str | Path | None = None) -> Path:
    """The JSONL file that holds every row of hub dataset `name` once it was downloaded (in
    `snapshot_dir`, default `dataset_cache_dir`)."""
    safe = re.sub(r"[^\w.-]", "__", name)
    return Path(snapshot_dir if snapshot_dir is not None else dataset_cache_dir()) / f"{safe}.jsonl"


def load_hub_dataset(name: str = KERNELBENCH_HUB_ID, levels: Iterable[int] | None = None, *,
                     snapshot_dir: str | Path | None = None, refresh: bool = False, **kwargs: Any
                     ) -> list[Problem]:
    """A Hugging Face dataset by id, downloaded once and read from a local snapshot afterwards.

    The first call downloads every split through `load_hf_dataset` and writes the rows to
    `hub_snapshot_path` (one JSON object a line, the hub's own columns); later calls read that file
    (no network, no `datasets` import) until `refresh` is true or the file is deleted. `kwargs` go
    to `datasets.load_dataset` on a download (``cache_dir`` there is the `datasets` cache).
    """
    snapshot = hub_snapshot_path(name, snapshot_dir)
    if snapshot.is_file() and not refresh:
        return load_hf_rows(snapshot, levels=levels)
    problems = load_hf_dataset(name, **kwargs)
    if not problems:
        raise ProblemError(f"the Hugging Face dataset {name} has no rows")
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    partial = snapshot.with_name(snapshot.name + ".partial")
    with partial.open("w", encoding="utf-8") as handle:
        for problem in problems:
            number = problem.problem_id.rsplit("/", 1)[-1]
            row = {"level": problem.level, "problem_id": int(number) if number.isdigit() else number,
                   "name": f"{problem.name}.py", "code": problem.source}
            handle.write(json.dumps(row) + "\n")
    partial.replace(snapshot)  # a download cut short never leaves a snapshot that looks complete
    wanted = set(levels) if levels is not None else None
    return [p for p in problems if wanted is None or p.level in wanted]


def builtin_suite() -> list[Problem]:
    """The problems written for tritongym: small shapes, sign-spanning inputs, honest solutions.

    Their ids are ``builtin/<file stem>``; the matching solutions are in the repository's
    ``examples/builtin/`` folder under the same file names.
    """
    folder = resources.files("tritongym.tasks") / "builtin"
    entries = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".py") and not entry.name.startswith("_")),
        key=lambda entry: entry.name,
    )
    problems = []
    for entry in entries:
        stem = entry.name[:-3]
        problems.append(
            Problem(source=entry.read_text(encoding="utf-8"), name=stem, problem_id=f"builtin/{stem}",
                    origin=f"tritongym:tasks/builtin/{entry.name}")
        )
    return problems


def load_problems(spec: str | Path, levels: Iterable[int] | None = None) -> list[Problem]:
    """Resolve a problem source from one string (what the CLI's ``--problems`` takes).

    ``builtin`` is the built-in suite; a ``.py`` file is one problem; a ``.jsonl`` or
    ``.parquet`` file holds Hugging Face layout rows; a directory is a KernelBench layout (a clone,
    its ``KernelBench/`` folder or one ``levelN/`` folder) or a plain folder of problem files; an
    ``owner/name`` that is no path here is a Hugging Face dataset id (``ScalingIntelligence/KernelBench``),
    downloaded once and read from the local snapshot afterwards (`load_hub_dataset`).
    """
    if str(spec) == "builtin":
        return builtin_suite()
    path = Path(spec)
    if path.is_dir():
        if _is_kernelbench_layout(path):
            return load_kernelbench_dir(path, levels=levels)
        return load_problem_folder(path)
    if path.suffix == ".py":
        return [load_problem_file(path)]
    if path.suffix in (".jsonl", ".parquet"):
        return load_hf_rows(path, levels=levels)
    if is_hub_id(spec):
        return load_hub_dataset(_HUB_ID.match(str(spec)).group(1), levels=levels)  # type: ignore[union-attr]
    if not path.exists():
        raise ProblemError(
            f"no such problem source: {spec} (expected 'builtin', a .py, .jsonl or .parquet file, a folder, or a "
            f"Hugging Face dataset id such as {KERNELBENCH_HUB_ID})")
    raise ProblemError(f"cannot read problems from {spec}: expected a .py, .jsonl or .parquet file or a folder")


def find_problem(problem: str | Path, source: str | Path = "builtin") -> Problem:
    """One problem, from a ``.py`` file or by id or name in `source` (``builtin/07_softmax``,
    ``kernelbench/level1/19`` with a KernelBench dataset as `source`)."""
    path = Path(problem)
    if path.is_file():
        return load_problem_file(path)
    text = str(problem)
    if text.endswith(".py"):
        raise ProblemError(f"problem file not found: {path}")
    problems = load_problems(source)
    for candidate in problems:
        if text in (candidate.problem_id, candidate.name):
            return candidate
    hint = f"; ids look like {problems[0].problem_id}" if problems else ""
    raise ProblemError(f"{text} is neither a problem file nor an id or name in {source}{hint} "
                       "('tritongym list --problems SOURCE' prints them)")


def select_problems(problems: Sequence[Problem], only: Iterable[str] | None, source: str | Path = "the set"
                    ) -> list[Problem]:
    """The problems named in ``only`` (by name or id; all of them when ``only`` is empty or None).

    Raises ``ValueError`` (a usage error) when ``only`` names none of them, naming the source."""
    if not only:
        return list(problems)
    wanted = set(only)
    chosen = [p for p in problems if p.name in wanted or p.problem_id in wanted]
    if not chosen:
        raise ValueError(f"none of {sorted(wanted)} is a problem of {source}")
    return chosen
