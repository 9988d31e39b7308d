"""Tests for tritongym.rl.schedulers.ResponseLengthLRDecay (rl-algorithms.md §6, §12 gotcha 10)."""

from __future__ import annotations

import copy

import pytest
import torch

from tritongym.rl import ResponseLengthLRDecay


def _make(lr=1e-6, **kwargs):
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=lr)
    return optimizer, ResponseLengthLRDecay(optimizer, **kwargs)


def _run(optimizer, scheduler, lengths):
    """One optimizer step per length; returns the LR used at each step."""
    used = []
    for length in lengths:
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step(length)
    return used


def test_schedule_fixture_spec_6_d1_gotcha_10():
    """Surge at step 110 (P = 198, floor 0.1): 1e-6 on 110–307, 5e-7 on 308–505, 2.5e-7 on 506–703,
    1.25e-7 on 704–901, 1e-7 from 902 (halving until the floor, not the reproduction's jump)."""
    optimizer, scheduler = _make(warmup_steps=10)
    lengths = [1000.0] * 110 + [4000.0] + [4000.0] * 1000
    lrs = _run(optimizer, scheduler, lengths)
    assert scheduler.surge_step == 110 and scheduler.period == 198
    expected = {
        110: 1e-6,
        307: 1e-6,
        308: 5e-7,
        505: 5e-7,
        506: 2.5e-7,
        703: 2.5e-7,
        704: 1.25e-7,
        901: 1.25e-7,
    }
    for step, lr in expected.items():
        assert lrs[step] == pytest.approx(lr, rel=1e-12), step
    assert all(lr == pytest.approx(1e-7, rel=1e-12) for lr in lrs[902:])
    assert lrs[0] == pytest.approx(1e-7) and lrs[9] == pytest.approx(1e-6)  # linear warm-up over 10 steps


def test_no_surge_keeps_lr_constant_spec_6_d2():
    optimizer, scheduler = _make(lr=2e-6)
    torch.manual_seed(0)
    lrs = _run(optimizer, scheduler, (1000 + 100 * torch.randn(400)).tolist())
    assert scheduler.surge_step is None
    assert all(lr == pytest.approx(2e-6) for lr in lrs[10:])


def test_surge_detection_is_one_shot_and_fires_at_first_long_step_spec_6_d3_d5():
    torch.manual_seed(1)
    optimizer, scheduler = _make()
    noisy = (1000 + 50 * torch.randn(200)).clamp(800, 1200).tolist()
    _run(optimizer, scheduler, noisy + [2900.0, 3100.0, 4000.0])
    assert scheduler.surge_step == 201  # first step with length > 3 × baseline ≈ 3000
    _run(optimizer, scheduler, [1000.0] * 100 + [20000.0])
    assert scheduler.surge_step == 201 and scheduler.period == round(1.8 * 201)


def test_state_dict_round_trip_resumes_identically_spec_6_d4():
    lengths = [1000.0] * 60 + [5000.0] * 140
    opt_a, sched_a = _make()
    full = _run(opt_a, sched_a, lengths)
    opt_b, sched_b = _make()
    first = _run(opt_b, sched_b, lengths[:80])
    state = copy.deepcopy(sched_b.state_dict())
    opt_state = copy.deepcopy(opt_b.state_dict())
    assert state["surge_step"] == 60 and state["period"] == 108 and "optimizer" not in state
    opt_c, sched_c = _make(surge_factor=9.0)  # different constructor args are overwritten by the state
    opt_c.load_state_dict(opt_state)
    sched_c.load_state_dict(state)
    rest = _run(opt_c, sched_c, lengths[80:])
    assert first + rest == pytest.approx(full, rel=1e-12)
    assert sched_c.surge_factor == 3.0


def test_saved_state_is_not_aliased_to_live_scheduler():
    optimizer, scheduler = _make(baseline_window=5)
    _run(optimizer, scheduler, [1.0, 2.0])
    state = scheduler.state_dict()
    _run(optimizer, scheduler, [3.0])
    assert state["window"] == [1.0, 2.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"surge_factor": 0.0}, "surge_factor"),
        ({"baseline_window": 0}, "baseline_window"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"warmup_steps": -1}, "warmup_steps"),
    ],
)
def test_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _make(**kwargs)
    _, scheduler = _make()
    with pytest.raises(ValueError, match="response_length"):
        scheduler.observe(float("nan"))
