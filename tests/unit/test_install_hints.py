"""Install commands for the trainer extras, as users copy them from the README, the docs, the
integrations' docstrings and ``--help`` (issue 23): one form that works from a clone,
``pip install -e '.[trl]' torch==2.13.0`` (the extras' packages would otherwise move torch; see
docs/training.md), never ``pip install 'tritongym[trl]'``, which looks for a released package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tritongym.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: Extras whose dependencies would replace the user's torch unless it is pinned in the same command.
TORCH_MOVING = ("trl", "verl", "openenv")
CLONE_FORM = re.compile(r"pip install -e\s+'\.\[(?P<extra>[a-z,]+)\]'(?P<rest>[^\n`\"]*)")
RELEASE_FORM = re.compile(r"pip install\s+['\"]?tritongym\[")


def texts() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "src" / "tritongym").rglob("*.py"))]


def test_trainer_extras_are_installed_from_the_clone_with_torch_pinned():
    offenders = []
    for path in texts():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        offenders += [f"{where}: {m[0]!r} (use pip install -e '.[extra]')" for m in RELEASE_FORM.finditer(text)]
        offenders += [f"{where}: {m[0]!r} lacks the torch pin" for m in CLONE_FORM.finditer(text)
                      if set(m["extra"].split(",")) & set(TORCH_MOVING) and "torch==2.13.0" not in m["rest"]]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("command", ["train", "openenv"])
def test_help_names_the_clone_install_with_the_torch_pin(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert re.search(r"pip install -e '\.\[(trl|openenv)\]' torch==2\.13\.0", help_text), help_text


def test_missing_extra_errors_name_the_pinned_clone_install():
    from tritongym.integrations.openenv import INSTALL_HINT as OPENENV
    from tritongym.integrations.trl.train import INSTALL_HINT as TRL

    assert TRL.startswith("pip install -e '.[trl]' torch==2.13.0")
    assert OPENENV.startswith("pip install -e '.[openenv]' torch==2.13.0")
