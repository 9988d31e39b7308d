"""benchmarks/learning_studies.py --quick: both learning studies of issue 48 at their CI size (§3).

The command runs once per module, as a user runs it: the reward-hacking study (`reward_hacking.py
--quick`: corpus from real jailed verdicts, pretraining, one seed × two rewards through
`run_trl_training`) and the early-stop ablation (`learning.py --quick`: two-turn episodes that end
at the first ``ok``, TRLOO and turn-GRPO from one pretrained policy), concurrently, each in its own
process. Asserted: what must hold on any draw. For §1, the two runs of a seed differ only in the
reward (the pretrained policy's rollouts at step 0 are the same texts), each run's rewards are its
rule applied to tritongym's verdicts of those texts (no shortcut is ever rewarded by tritongym; every
one is by the naive rule), and the verdict cache served repeated texts. For §2, the episodes did stop
early (later turns have fewer members per group), no turn was rewarded with a violation, and the RL
verdicts came from the cache. The learning curves themselves are the benchmarks' to report
(docs/training.md): over 4 steps they are noise-bound. The wall time is recorded, not asserted (the
machine is shared); docs/training.md gives the measured runs and their margin under 5 minutes.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]'; see .ci/trl)")
pytest.importorskip("matplotlib", reason="the studies draw their figures (pip install matplotlib)")

from tests.unit.bench.conftest import load_benchmark  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    out = tmp_path_factory.mktemp("studies")
    assert load_benchmark("learning_studies").main(["--quick", "--out", str(out)]) == 0
    return out, json.loads((out / "studies.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def quick(studies):
    out, _ = studies
    folder = out / "reward_hacking"
    return load_benchmark("reward_hacking"), folder, json.loads((folder / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def early_stop(studies):
    out, _ = studies
    return json.loads((out / "early_stop" / "results.json").read_text(encoding="utf-8"))


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
    assert (out / "reward_hacking.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_quick_ablation_stops_at_the_first_ok_so_later_turns_have_fewer_members(early_stop):
    rl = early_stop["rl"]
    assert rl["stop_on"] == "correct" and rl["turns"] == 2
    assert [r["advantage"] for r in early_stop["runs"]] == ["trloo", "turn_grpo"]
    for run in early_stop["runs"]:
        first, second = run["turn_groups"]
        # Every trajectory has a first turn: whole groups (num_generations each) there.
        assert first["mean_members"] >= rl["num_generations"] and first["alone_share"] == 0
        # A trajectory ends at its first ok, and the pretrained policy's first answer is often ok.
        assert second["mean_members"] < first["mean_members"], run["turn_groups"]
        assert any(point["ok_first"] > 0 for point in run["curve"])
        assert len(run["curve"]) == rl["steps"]
        # Not one turn rewarded while carrying an integrity violation.
        assert [hack for point in run["curve"] for hack in point["hacks"]] == []


def test_the_quick_ablation_reads_its_verdicts_from_one_seeded_cache(early_stop):
    assert early_stop["rl"]["eval_seed"] is not None
    cache = early_stop["cache"]
    turns = sum(point["trajectories"] for run in early_stop["runs"] for point in run["curve"])
    assert cache["hits"] > 0 and cache["evaluations"] < turns + len(early_stop["variants"])
    # Both estimators ran from the same pretrained policy under the same seed: step 0's rollouts are
    # the same (the update comes after), so their first point agrees.
    trloo, grpo = early_stop["runs"]
    assert trloo["curve"][0] == grpo["curve"][0]


def test_the_command_records_both_studies_and_its_wall_time(studies):
    out, summary = studies
    assert set(summary["studies"]) == {"reward_hacking", "early_stop"} and summary["quick"] is True
    for study in summary["studies"].values():
        profile = study["profile"]
        assert profile["rl_runs"] == 2  # one seed: two rewards, or two estimators
        assert profile["train_s"] == pytest.approx(profile["generation_s"] + profile["evaluation_s"]
                                                   + profile["update_and_rest_s"], abs=0.3)
        assert 0 < study["process_wall_s"] <= summary["wall_s"]
    assert (out / "early_stop" / "learning_early_stop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"learning_studies --quick: {summary['wall_s']:.0f} s, load average {summary['load_average_before']} "
          f"before, {summary['load_average_after']} after")
