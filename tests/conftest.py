"""Shared fixtures, marker handling and the two test tiers for the whole test suite.

Tiers (docs/testing.md says what each holds and how long it takes):

* the default run (``python -m pytest``): every test under ``tests/unit/`` and ``tests/env/``, and
  from the other folders only the tests `DEFAULT_TIER` names (each area's fast unit layers and one
  real jailed evaluation or a few, the clean room's attack families one case each); never a test
  marked ``slow``. A new test falls in by its folder: fast folders run it by default, the others
  (whole evaluations, corpora, real servers and pools) only in the full run.
* the full run (``python -m pytest --full``; ``.ci/run`` adds ``-n 2 --dist loadfile``, two test
  processes): everything.
The tier is not applied to tests picked by hand: files or node ids named on the command line, or a
``-m``/``-k`` expression, select exactly what they say.

Markers (registered in pyproject.toml):

* ``gpu``: skipped unless ``torch.cuda.is_available()``;
* ``sandbox``: skipped when bubblewrap cannot jail a process here
  (`tritongym.evaluator.jail.sandbox.bwrap_problem()` says why);
* ``slow``: runs in the full run only (``--full``), wherever it lives.

The KernelBench data is read in place from ``<repo>/../shared/datasets/kernelbench/`` (a fresh
clone with ``shared/`` beside it works); tests that need it skip, with the path, when it is absent.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

# A private data directory for the whole session: `tritongym eval` uses a `tritongym serve` it finds
# recorded there (service/local.py), so a developer's own running server must not answer the tests'
# evaluations, and the tests' servers must not outlive the session in the developer's record.
# Likewise the cache (hub snapshots, the pre-flight's size estimates): the tests start from none.
for _variable, _prefix in (("XDG_DATA_HOME", "tritongym-test-data-"), ("TRITONGYM_CACHE_DIR", "tritongym-test-cache-")):
    os.environ[_variable] = tempfile.mkdtemp(prefix=_prefix)
    atexit.register(shutil.rmtree, os.environ[_variable], ignore_errors=True)

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
KERNELBENCH_DIR = REPO_ROOT.parent / "shared" / "datasets" / "kernelbench"
# TRITONGYM_KERNELBENCH_JSONL names the file where shared/ is not beside the repository (a worktree).
KERNELBENCH_JSONL = Path(os.environ.get("TRITONGYM_KERNELBENCH_JSONL", "")
                         or KERNELBENCH_DIR / "kernelbench_l1-l3.jsonl")


TESTS_DIR = REPO_ROOT / "tests"

#: Folders under tests/ whose tests all run by default (in-process, or a short subprocess each).
DEFAULT_FOLDERS = frozenset({"unit", "env"})

#: From every other folder, what the default run keeps: a file (all its tests) or one test's node
#: id, relative to tests/. `tests/unit/test_tiers.py` fails when an entry names nothing.
DEFAULT_TIER = frozenset({
    # Fast unit layers: the pool, fork server, references, service core and store with their real
    # processes faked, and the corpus's header schema (no evaluation in any of them).
    "adversarial/test_header_schema.py",
    "execution/test_pool_units.py",
    "execution/test_forkserver_units.py",
    "execution/test_references_units.py",
    "service/test_core_seams.py",
    "service/test_store_units.py",
    "service/test_store.py",
    "service/test_store_bounds.py",
    "service/test_kernelgym_mapping_defaults.py",
    # One or a few real jailed evaluations per area.
    "e2e/test_statuses.py::test_ok",
    "e2e/test_cli.py::test_eval_json_prints_one_contract_object_and_exits_0_for_every_status[ok]",
    "e2e/test_isolation.py::test_endless_loop_times_out_and_everything_it_started_is_killed[auto]",
    "sandbox/test_boundary.py::test_there_is_no_proc_in_the_jail",
    "sandbox/test_escapes.py::test_children_that_outlive_the_candidate_are_killed",
    "execution/test_forkserver.py::test_an_honest_candidate_is_ok_through_the_fork_server",
    "execution/test_pool_descendants.py::test_a_timed_out_job_leaves_no_descendant_behind",
    "service/test_api.py::test_submit_then_fetch_and_list",
    "service/test_security_jail.py::test_a_client_problem_wearing_a_builtin_id_and_name_is_still_jailed",
    "acceptance/test_llm_idioms.py::test_honest_idiom_is_ok_every_time"
    "[mask_and_scalar-relu_problem-a block mask & a scalar condition (row < n_rows) on a padded grid]",
    # The clean room's case list and an honest control (its attacks: `ONE_PER_FAMILY`).
    "adversarial/test_cleanroom.py::test_every_clean_room_case_is_listed",
    "adversarial/test_cleanroom.py::test_honest_control_passes_the_clean_room_alone[C0-honest-relu-uniform]",
})

#: Parametrized tests of which the default run keeps one case per family: the first by id of each
#: leading letter and number (F1, F2, ..., A1, G1, ...), so that a new family joins without an edit.
ONE_PER_FAMILY = frozenset({"adversarial/test_cleanroom.py::test_attack_stopped_by_the_clean_room_alone"})
FAMILY = re.compile(r"[A-Z]+[0-9]+")


def family_of(case_id: str) -> str | None:
    """``F2`` of ``F2-erase-live-log``; None for an id without a family prefix."""
    match = FAMILY.match(case_id)
    return match.group(0) if match else None


def family_picks(items: list[pytest.Item]) -> set[str]:
    """Node ids (as `tier_key` spells them) of the first case by id of each family of the
    `ONE_PER_FAMILY` tests among `items`."""
    first: dict[tuple[str, str | None], str] = {}
    for item in items:
        key = tier_key(item)
        callspec = getattr(item, "callspec", None)
        if key is None or callspec is None:
            continue
        test = f"{key[0]}::{getattr(item, 'originalname', item.name)}"
        if test in ONE_PER_FAMILY:
            slot = (test, family_of(callspec.id))
            if slot not in first or key[1] < first[slot]:
                first[slot] = key[1]
    return set(first.values())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", default=False,
                     help="run the full tier: every test, the slow ones and every corpus and end-to-end "
                          "test included (without it, the default tier; tests/conftest.py says which)")


def tier_key(item: pytest.Item) -> tuple[str, str] | None:
    """``(file, node id)`` of `item` relative to tests/ (as `DEFAULT_TIER` spells them), or None
    for a test outside tests/."""
    try:
        relative = item.path.resolve().relative_to(TESTS_DIR).as_posix()
    except ValueError:
        return None
    name = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    return relative, f"{relative}::{name}"


def in_default_tier(item: pytest.Item, picks: set[str] = frozenset()) -> bool:
    """Whether the default run keeps `item`; `picks` are `family_picks` of the collection."""
    if item.get_closest_marker("slow"):
        return False
    key = tier_key(item)
    if key is None:
        return True
    relative, node = key
    return (relative.split("/", 1)[0] in DEFAULT_FOLDERS or relative in DEFAULT_TIER or node in DEFAULT_TIER
            or node in picks)


def _named_files(config: pytest.Config) -> set[Path]:
    """Files named on the command line, alone or in a node id: their tests are picked by hand."""
    named = set()
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if "::" in arg or path.is_file():
            named.add(path)
    return named


#: How many tests the default tier left out, for the closing line.
_LEFT_FOR_FULL = pytest.StashKey[int]()


def _apply_tier(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("full") or config.getoption("markexpr") or config.getoption("keyword"):
        return
    named = _named_files(config)
    picks = family_picks(items)
    kept, left = [], []
    for item in items:
        (kept if item.path.resolve() in named or in_default_tier(item, picks) else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    config.stash[_LEFT_FOR_FULL] = len(left)



def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("full"):
        return "tier: full (--full: every test)"
    if config.getoption("markexpr") or config.getoption("keyword"):
        return "tier: as -m/-k select (no tier applied)"
    return "tier: default (the slow, corpus and end-to-end tests run with --full)"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT_FOR_FULL, 0)
    if left:
        terminalreporter.write_line(f"default tier: {left} tests left for the full run "
                                    "(python -m pytest --full runs every test)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tier (`_apply_tier`); skip ``gpu`` tests without CUDA and ``sandbox`` tests where bwrap
    cannot run."""
    _apply_tier(config, items)
    wants_gpu = any(item.get_closest_marker("gpu") for item in items)
    wants_sandbox = any(item.get_closest_marker("sandbox") for item in items)
    skip_gpu = skip_sandbox = None
    if wants_gpu:
        import torch

        if not torch.cuda.is_available():
            skip_gpu = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    if wants_sandbox:
        from tritongym.evaluator.jail.sandbox import bwrap_problem

        problem = bwrap_problem()
        if problem is not None:
            skip_sandbox = pytest.mark.skip(reason=f"needs a working bubblewrap sandbox: {problem}")
    for item in items:
        if skip_gpu is not None and item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)
        if skip_sandbox is not None and item.get_closest_marker("sandbox"):
            item.add_marker(skip_sandbox)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (the folder holding ``src/`` and ``tests/``)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """``tests/fixtures``: small problems and candidate solutions for the evaluator tests."""
    return FIXTURES


@pytest.fixture(scope="session")
def kernelbench_jsonl() -> Path:
    """The shared KernelBench levels 1-3 JSONL (250 rows); skips when ``shared/`` is not beside the repo."""
    if not KERNELBENCH_JSONL.is_file():
        pytest.skip(
            f"the shared KernelBench dataset is absent: {KERNELBENCH_JSONL} "
            "(clone the project with shared/ beside it)"
        )
    return KERNELBENCH_JSONL


@pytest.fixture(scope="session")
def kernelbench_rows(kernelbench_jsonl: Path) -> list[dict]:
    """The shared dataset's rows as dicts, in file order."""
    import json

    with kernelbench_jsonl.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="session")
def builtin_problems():
    """`tritongym.builtin_suite()`, loaded once."""
    from tritongym.tasks import builtin_suite

    return builtin_suite()
