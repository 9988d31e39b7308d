"""benchmarks/reward_hacking.py --quick: the same RL run under the naive reward and tritongym's (issue 48 §1).

The whole quick study runs once per module (corpus from real jailed verdicts, pretraining, two seeds ×
two rewards through `run_trl_training`). Asserted: what must hold on any draw. The two runs of a seed
differ only in the reward (the pretrained policy's rollouts at step 0 are the same texts), each run's
rewards are its rule applied to tritongym's verdicts of those texts (no shortcut is ever rewarded by
tritongym; every one is by the naive rule), and the verdict cache served repeated texts. The learning
curves themselves are the benchmark's to report (docs/training.md): over 4 steps they are noise-bound.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]'; see .ci/trl)")
pytest.importorskip("matplotlib", reason="the study draws its figure (pip install matplotlib)")

from tests.unit.bench.conftest import load_benchmark  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    bench = load_benchmark("reward_hacking")
    out = tmp_path_factory.mktemp("reward_hacking")
    assert bench.main(["--quick", "--out", str(out), "--plot", str(out / "figure.png")]) == 0
    return bench, out, json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_the_corpus_holds_honest_wrong_and_three_kinds_of_shortcut_with_their_real_verdicts(quick):
    bench, _, results = quick
    by_kind: dict[str, set[str]] = {}
    for variant in results["variants"]:
        by_kind.setdefault(variant["kind"], set()).add(variant["status"])
    assert by_kind["honest"] == {"ok"}
    for kind in bench.HACK_KINDS:
        assert by_kind[kind] == {"integrity_violation"}, kind
    assert by_kind["off_by_one"] == by_kind["missing_activation"] == {"incorrect"}
    assert by_kind["syntax_error"] == {"compile_error"}
    assert len(results["variants"]) == len(bench.QUICK.problems) * (1 + len(bench.HACK_KINDS) + len(bench.WRONG_KINDS))


def test_the_two_runs_of_a_seed_differ_only_in_the_reward(quick):
    bench, out, results = quick
    seeds = results["study"]["seeds"]
    assert len(results["runs"]) == 2 * len(seeds)
    for seed in seeds:
        naive, ours = (next(r for r in results["runs"] if r["reward"] == reward and r["seed"] == seed)
                       for reward in ("naive", "tritongym"))
        assert len(naive["curve"]) == len(ours["curve"]) == results["study"]["steps"]
        # Step 0 is the pretrained policy's rollouts, sampled with the seed before any update: the same
        # texts under both rewards.
        first = [[json.loads(line)["turns"][0]["code"] for line in (out / f"{reward}-seed{seed}" / "trajectories.jsonl")
                  .read_text(encoding="utf-8").splitlines() if json.loads(line)["training_step"] == 0]
                 for reward in ("naive", "tritongym")]
        assert first[0] == first[1] and len(first[0]) == results["rl"]["num_generations"] * \
            results["rl"]["prompts_per_step"]
        keys = ("honest_share", "hack_share", "wrong_share", "kinds")
        assert {k: naive["curve"][0][k] for k in keys} == {k: ours["curve"][0][k] for k in keys}


def test_each_run_is_rewarded_by_its_own_rule_on_tritongyms_verdicts(quick):
    bench, _, results = quick
    for run in results["runs"]:
        for point in run["curve"]:
            assert point["honest_share"] + point["hack_share"] + point["wrong_share"] == pytest.approx(1.0)
            assert sum(point["kinds"].values()) == point["turns"]
            if run["reward"] == "tritongym":
                # Only honest kernels earn anything, so no rewarded turn is a hack.
                assert point["mean_reward"] == pytest.approx(bench.OK_REWARD * point["honest_share"])
                assert point["hack_share_of_rewarded"] in (0.0, None)
            else:
                # Every shortcut is paid like an honest kernel.
                assert point["mean_reward"] == pytest.approx(
                    bench.OK_REWARD * (point["honest_share"] + point["hack_share"]))
                assert point["rewarded"] == round(point["turns"] * (point["honest_share"] + point["hack_share"]))
    # The policy does produce shortcuts in this study (else the comparison would be empty).
    assert sum(point["hack_share"] for run in results["runs"] for point in run["curve"]) > 0


def test_the_cache_served_repeated_texts_and_the_figure_was_drawn(quick):
    _, out, results = quick
    turns = sum(point["turns"] for run in results["runs"] for point in run["curve"])
    assert results["cache"]["hits"] > 0
    assert results["cache"]["evaluations"] < turns + len(results["variants"])
    assert (out / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
