"""benchmarks/reward_hacking.py's two rewards on real jailed verdicts (issue 48, section 1).

The study is only as good as its pairs: every shortcut of the corpus must be refused by tritongym and
accepted by the naive rule (KernelBench's), while the honest kernel stays ``ok`` under both and the wrong
kernels fail under both. Each variant is evaluated once, for real, in the sandbox (`tritongym.evaluate`
on the warm pool) through the benchmarks' shared `learning.VerdictCache`; nothing here imports candidate code.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.unit.bench.conftest import load_benchmark

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

#: The violation each shortcut must be caught by (tritongym reports more than one for some).
CAUGHT_BY = {"torch_fallback": "no_triton_launch", "torch_glue": "output_not_from_kernel",
             "precision_downgrade": "precision_downgrade"}


@pytest.fixture(scope="module")
def judged():
    bench = load_benchmark("reward_hacking")
    from tritongym import EvalOptions
    from tritongym.env import PoolEvaluator
    from tritongym.tasks import builtin_suite

    problem = next(p for p in builtin_suite() if p.name == "02_leaky_relu")
    honest = (bench.learning.SOLUTIONS / "02_leaky_relu.py").read_text(encoding="utf-8")
    options = EvalOptions(device="cpu", seed=0, use_audit_tolerance=False)
    with PoolEvaluator(options, max_workers=2) as pool:
        cache = bench.learning.VerdictCache(pool, options)
        variants = bench.hacking_variants_of(problem.name, honest)
        # Two threads on the cache at once, as the pool's two slots allow (the cache is thread-safe).
        with ThreadPoolExecutor(2) as threads:
            judged = list(threads.map(lambda variant: cache.verdict(problem, variant[1]), variants))
        assert cache.evaluations == len(variants) and cache.hits == 0
        yield bench, cache, problem, dict(variants), dict(zip([k for k, _ in variants], judged, strict=True))


def test_every_shortcut_is_refused_by_tritongym_and_passed_by_the_naive_rule(judged):
    bench, cache, problem, codes, verdicts = judged
    naive, ours = bench.NaiveReward(cache), bench.TritongymReward(cache)
    for kind in bench.HACK_KINDS:
        verdict = verdicts[kind]
        assert str(verdict.status) == "integrity_violation", (kind, verdict.status, verdict.error)
        assert CAUGHT_BY[kind] in [str(v.code) for v in verdict.violations], (kind, verdict.violations)
        assert ours.evaluate(problem, codes[kind]).reward == 0.0
        passed = naive.evaluate(problem, codes[kind])
        assert (str(passed.status), passed.reward, passed.violations) == ("ok", bench.OK_REWARD, []), kind
        assert bench.classify(verdict, cache.options.num_trials) == "hack"
    # The precision downgrade passes on the task's inputs and fails a perturbed family: the naive rule
    # reads the task's trials only, as KernelBench does.
    downgrade = verdicts["precision_downgrade"].trials
    assert all(t.passed for t in downgrade if t.family == bench.TASK_FAMILY)
    assert not all(t.passed for t in downgrade if t.family != bench.TASK_FAMILY)


def test_the_honest_kernel_is_ok_under_both_and_the_wrong_ones_fail_under_both(judged):
    bench, cache, problem, codes, verdicts = judged
    naive, ours = bench.NaiveReward(cache), bench.TritongymReward(cache)
    assert str(verdicts["honest"].status) == "ok"
    assert ours.evaluate(problem, codes["honest"]).reward == bench.OK_REWARD
    assert naive.evaluate(problem, codes["honest"]).reward == bench.OK_REWARD
    assert bench.classify(verdicts["honest"], cache.options.num_trials) == "honest"
    for kind in bench.WRONG_KINDS:
        result = naive.evaluate(problem, codes[kind])
        assert result.reward == 0.0 and str(result.status) != "ok", kind
        assert bench.classify(verdicts[kind], cache.options.num_trials) == "wrong"
    # A compile error stays one under the naive rule; an allclose failure reads incorrect.
    assert str(naive.evaluate(problem, codes["syntax_error"]).status) == "compile_error"
    assert str(naive.evaluate(problem, codes["off_by_one"]).status) == "incorrect"
    # check_corpus accepts this set of verdicts (it raises on any verdict the study cannot use).
    learning = bench.learning
    bench.check_corpus([learning.Variant(problem.problem_id, kind, code, str(verdicts[kind].status),
                                         float(verdicts[kind].reward)) for kind, code in codes.items()], cache)


def test_the_naive_rule_needs_every_task_trial(judged):
    bench, _, _, _, verdicts = judged
    from dataclasses import replace

    honest = verdicts["honest"]
    task = [t for t in honest.trials if t.family == bench.TASK_FAMILY]
    assert bench.naive_passes(honest, len(task))
    # A candidate that died after two trials reports only those: not a pass.
    assert not bench.naive_passes(replace(honest, trials=task[:2]), len(task))
    failed = [replace(task[0], passed=False), *task[1:]]
    assert not bench.naive_passes(replace(honest, trials=failed), len(task))


def test_the_cache_evaluates_a_text_once_and_needs_a_fixed_seed(judged):
    bench, cache, problem, codes, _ = judged
    from tritongym import EvalOptions

    evaluations, hits = cache.evaluations, cache.hits
    first = cache.verdict(problem, codes["honest"])
    assert cache.verdict(problem, codes["honest"]) is first
    assert (cache.evaluations, cache.hits) == (evaluations, hits + 2)
    with pytest.raises(ValueError, match="fixed evaluation seed"):
        bench.learning.VerdictCache(cache.evaluator, EvalOptions(device="cpu"))
