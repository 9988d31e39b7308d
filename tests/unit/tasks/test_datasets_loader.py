"""load_hf_dataset through a real Hugging Face `datasets` install (offline: its JSON builder)."""

from __future__ import annotations

import pytest

from tritongym import load_hf_dataset, load_hf_rows

datasets = pytest.importorskip("datasets")


def test_the_shared_dataset_loads_through_datasets_like_through_jsonl(kernelbench_jsonl, tmp_path):
    via_datasets = load_hf_dataset("json", data_files=str(kernelbench_jsonl), cache_dir=str(tmp_path))
    via_jsonl = load_hf_rows(kernelbench_jsonl)
    assert len(via_datasets) == 250
    assert [p.problem_id for p in via_datasets] == [p.problem_id for p in via_jsonl]
    assert [p.content_hash for p in via_datasets] == [p.content_hash for p in via_jsonl]


def test_levels_narrow_the_rows(kernelbench_jsonl, tmp_path):
    level3 = load_hf_dataset("json", data_files=str(kernelbench_jsonl), cache_dir=str(tmp_path), levels=[3])
    assert len(level3) == 50 and {p.level for p in level3} == {3}
