"""A fresh evaluation starts its clean room with the candidate (issue 46): one room, used or ended.

The room's start (bwrap, torch and Triton imports: 1.5-2 s on the 2-core machine) used to follow
the trials; it now overlaps them. What must hold: exactly one room per evaluation, the verdicts
unchanged, and a room an evaluation did not need (the candidate failed first) ended with it.
"""

from __future__ import annotations

import pytest

import tritongym
from tritongym import Status
from tritongym.evaluator import parent

from .helpers import TINY_RELU, candidate


@pytest.fixture
def rooms(monkeypatch):
    """Every clean-room worker started during the test, as handles."""
    started = []
    real = parent._start_clean_room

    def recording(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(parent, "_start_clean_room", recording)
    return started


def _alive(handle) -> bool:
    return handle.process.popen.poll() is None


@pytest.mark.parametrize(("name", "status"), [("relu_honest", Status.OK), ("relu_forward_raises", Status.RUNTIME_ERROR),
                                            ("relu_wrong", Status.INCORRECT)])
def test_one_room_per_fresh_evaluation_and_none_left_running(rooms, name, status):
    result = tritongym.evaluate(TINY_RELU, candidate(name), device="cpu", num_trials=2, timeout=120)
    assert result.status == status, result.error
    assert len(rooms) == 1  # started with the candidate, used by the replays when they came
    assert not _alive(rooms[0])
