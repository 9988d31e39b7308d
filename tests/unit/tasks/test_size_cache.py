"""The pre-flight's size estimates, kept by content hash (`bench.audit.probe.estimate_sizes`, issue 46).

A single `tritongym eval` spent 2.8 s of its 10 s starting the meta-device probe for a problem
whose sizes never change; the cache answers the second time. Real probe runs: the first call
probes, the second must not start a probe at all.
"""

from __future__ import annotations

import json

import pytest

import tritongym
from tritongym.bench.audit import probe

PROBLEM = next(p for p in tritongym.builtin_suite() if p.name == "07_softmax")
OTHER = next(p for p in tritongym.builtin_suite() if p.name == "02_leaky_relu")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONGYM_CACHE_DIR", str(tmp_path))
    return tmp_path / "sizes"


class _NoProbe:
    def __init__(self, *args, **kwargs):
        raise AssertionError("the probe was started although the estimate is cached")


def test_a_probed_estimate_is_read_back_without_starting_the_probe(cache, monkeypatch):
    first = probe.estimate_sizes([PROBLEM])[PROBLEM.content_hash]
    assert first.error is None and first.input_bytes and (cache / f"{PROBLEM.content_hash}.json").is_file()
    monkeypatch.setattr(probe, "_Prober", _NoProbe)
    assert probe.estimate_sizes([PROBLEM]) == {PROBLEM.content_hash: first}


def test_only_the_problems_not_cached_are_probed(cache, monkeypatch):
    probe.estimate_sizes([PROBLEM])
    probed = []
    real = probe._Prober.estimate
    monkeypatch.setattr(probe._Prober, "estimate", lambda self, p, **kw: probed.append(p.name) or real(self, p, **kw))
    both = probe.estimate_sizes([PROBLEM, OTHER])
    assert probed == ["02_leaky_relu"] and set(both) == {PROBLEM.content_hash, OTHER.content_hash}


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """One real probe of PROBLEM, and its cache entry as written."""
    root = tmp_path_factory.mktemp("size-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITONGYM_CACHE_DIR", str(root))
        estimate = probe.estimate_sizes([PROBLEM])[PROBLEM.content_hash]
    return estimate, json.loads((root / "sizes" / f"{PROBLEM.content_hash}.json").read_text())


@pytest.mark.parametrize("spoil", [
    lambda entry: {**entry, "torch": "0.0.1"},                                      # another torch
    lambda entry: {**entry, "schema": probe.SIZE_CACHE_SCHEMA + 1},                 # another layout
    lambda entry: {**entry, "estimate": {**entry["estimate"], "input_bytes": -1}},  # not a size
    lambda entry: {**entry, "estimate": {**entry["estimate"], "flops": True}},
    lambda entry: {**entry, "estimate": {**entry["estimate"], "error": "probe died"}},
    lambda entry: {**entry, "estimate": {**entry["estimate"], "measured_on": "cpu"}},
    lambda entry: {**entry, "estimate": {"input_bytes": 1}},                        # fields missing
    lambda entry: "not an object",
])
def test_an_entry_that_does_not_fit_this_machine_or_is_damaged_is_not_used(cache, probed, spoil):
    estimate, entry = probed
    cache.mkdir()
    path = cache / f"{PROBLEM.content_hash}.json"
    path.write_text(json.dumps(entry))
    assert probe._cached_estimate(PROBLEM) == estimate  # the entry as written is used
    path.write_text(json.dumps(spoil(entry)))
    assert probe._cached_estimate(PROBLEM) is None


BROKEN = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("cannot build")

    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""


def test_an_estimate_with_an_error_is_not_kept_and_cache_false_reads_nothing(cache, monkeypatch):
    broken = tritongym.Problem.from_source(BROKEN, name="broken")
    assert probe.estimate_sizes([broken])[broken.content_hash].error
    assert not (cache / f"{broken.content_hash}.json").exists()
    probe.estimate_sizes([PROBLEM])
    monkeypatch.setattr(probe, "_Prober", _NoProbe)
    with pytest.raises(AssertionError, match="probe was started"):
        probe.estimate_sizes([PROBLEM], cache=False)


USER_PROBLEM = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 125)]


def get_init_inputs():
    return []
"""


def test_the_cpu_sizing_of_a_problem_file_probes_it_once_across_processes(cache, monkeypatch):
    """`tritongym eval --problem mine.py` sizes the file in each new process: the second process reads
    the estimate the first kept (its in-process memo, `sizing._computed`, is cleared to stand for it)."""
    from tritongym.tasks import sizing

    mine = tritongym.Problem.from_source(USER_PROBLEM, name="mine")
    probed = []
    real = probe._Prober.estimate
    monkeypatch.setattr(probe._Prober, "estimate", lambda self, p, **kw: probed.append(p.name) or real(self, p, **kw))
    monkeypatch.setattr(sizing, "_computed", {})
    first = sizing.sizing_records([mine])[mine.content_hash]
    assert probed == ["mine"] and (cache / f"{mine.content_hash}.json").is_file()
    monkeypatch.setattr(sizing, "_computed", {})
    again = sizing.sizing_records([mine])[mine.content_hash]
    assert probed == ["mine"] and again == first and first.status == sizing.SizingStatus.UNCHANGED
