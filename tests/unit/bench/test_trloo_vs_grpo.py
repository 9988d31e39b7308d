"""benchmarks/trloo_vs_grpo.py on a small setting: the facts it reports must hold for the project's own
TRLOO and turn-level GRPO (issue 48, section 2), so that swapped or broken estimators fail here.

Every setting is seeded, so each statistical assertion is deterministic; the 4-SE tolerances were met
with a margin on these seeds, and the separations asserted (≥ 10 SE) are many times that."""

from __future__ import annotations

import math

import pytest
import torch
from tests.unit.bench.conftest import load_benchmark

GROUPS = 8_000
P_OK = (0.30, 0.45, 0.55)
P_ERROR = (0.10, 0.08, 0.06)


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("trloo_vs_grpo")


@pytest.fixture(scope="module")
def early(bench):
    setting = bench.Setting(p_ok=P_OK, p_error=P_ERROR, early_stop=True, groups=GROUPS)
    return setting, bench.measure(setting, seed=0)


def test_early_stop_leaves_later_turns_with_smaller_groups(bench, early):
    setting, stats = early
    assert [st.turn for st in stats] == [1, 2, 3]
    assert stats[0].mean_group_size == 4.0 and stats[0].singleton_share == 0.0
    assert stats[0].mean_group_size > stats[1].mean_group_size > stats[2].mean_group_size > 1.0
    assert stats[2].singleton_share > 0.25  # turn 3: a third of the members are alone
    episodes = GROUPS * setting.group_size
    for t, st in enumerate(stats):
        q = setting.reach_probability(t)
        assert abs(st.reach - q) <= 4 * math.sqrt(q * (1 - q) / episodes) + 1e-12
        # E[N | N >= 1] for N ~ Binomial(s, q)
        assert st.mean_group_size == pytest.approx(4 * q / (1 - (1 - q) ** 4), abs=0.03)


def test_trloo_is_unbiased_and_grpo_is_shrunk_by_self_inclusion_per_turn(early):
    _, stats = early
    predicted = [st.predicted_grpo_bias for st in stats]
    assert predicted[0] == pytest.approx(-0.25)  # a full group of 4: (N − 1)/N = 3/4
    assert predicted == pytest.approx([-0.25, -0.406, -0.651], abs=1e-3)
    for st in stats:
        assert abs(st.trloo.bias) <= 4 * st.trloo.bias_se, st
        assert abs(st.grpo.bias - st.predicted_grpo_bias) <= 4 * st.grpo.bias_se, st
        # Swapped estimators would land on the other's prediction, far outside the tolerance.
        assert abs(st.grpo.bias) >= 10 * st.grpo.bias_se
        assert abs(st.trloo.bias - st.predicted_grpo_bias) >= 10 * st.trloo.bias_se
    # The tilt: GRPO weights turn 3's gradient less than half as much, relative to turn 1, as TRLOO does.
    gain = [1 + st.grpo.bias for st in stats]
    assert gain[2] / gain[0] < 0.5
    # Where groups are ragged, TRLOO's larger advantages carry less noise per unit of signal.
    assert stats[2].trloo.std / (1 + stats[2].trloo.bias) < stats[2].grpo.std / (1 + stats[2].grpo.bias)


def test_grpo_is_trloo_times_n_minus_1_over_n_and_zero_for_a_lone_member(bench):
    setting = bench.Setting(p_ok=P_OK, p_error=P_ERROR, early_stop=True, groups=500)
    episodes = bench.simulate(setting, seed=3)
    trloo, grpo, returns = bench.advantages(episodes)
    mask = episodes.mask
    sizes = mask.view(-1, setting.group_size, setting.turns).sum(1).repeat_interleave(setting.group_size, 0)
    lone = mask & (sizes == 1)
    assert lone.any() and (mask & (sizes > 1)).any()
    n = sizes.double()
    factor = torch.where(sizes > 1, (n - 1) / n.clamp_min(1), 0.0)
    torch.testing.assert_close(grpo[mask], (factor * trloo)[mask], rtol=0, atol=1e-12)
    torch.testing.assert_close(trloo[lone], returns[lone], rtol=0, atol=0)  # baseline 0 when alone
    assert (grpo[lone] == 0).all()


def test_full_groups_make_the_two_coincide_up_to_three_quarters(bench):
    setting = bench.Setting(p_ok=P_OK, p_error=P_ERROR, early_stop=False, groups=GROUPS)
    trloo, grpo, _ = bench.advantages(bench.simulate(setting, seed=1))
    torch.testing.assert_close(grpo, 0.75 * trloo, rtol=0, atol=1e-12)
    for st in bench.measure(setting, seed=1):
        assert st.mean_group_size == 4.0 and st.reach == 1.0
        assert st.predicted_grpo_bias == pytest.approx(-0.25)
        assert abs(st.trloo.bias) <= 4 * st.trloo.bias_se
        assert 1 + st.grpo.bias == pytest.approx(0.75 * (1 + st.trloo.bias), abs=1e-9)
        assert st.grpo.flips == st.trloo.flips and st.grpo.zeroed == st.trloo.zeroed


def test_main_prints_both_settings(bench, capsys):
    assert bench.main(["--seeds", "0", "1", "--groups", "300", "--p-ok", "0.3,0.5", "--p-error", "0.1,0.1"]) == 0
    out = capsys.readouterr().out
    assert "### early stop at ok or error" in out and "### full groups (no early stop)" in out
    assert "| 2 |" in out and "| 3 |" not in out


@pytest.mark.parametrize("kwargs, message", [
    ({"p_ok": (0.9,), "p_error": (0.2,)}, "p_ok \\+ p_error <= 1"),
    ({"p_ok": (0.3, 0.4), "p_error": (0.1,)}, "one probability per turn"),
    ({"group_size": 1}, "group_size"),
    ({"reward": "tpu"}, "'gpu' or 'cpu'"),
])
def test_bad_settings_are_refused_with_the_reason(bench, kwargs, message):
    with pytest.raises(ValueError, match=message):
        bench.Setting(**kwargs)
