"""``tritongym train --trainer trl``: the CPU smoke run (tiny-random, 2 turns, 2 real GRPO steps on the
built-in suite against the real evaluator) and the usage errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tritongym.evaluator import Status

needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                               reason="trl is not installed (pip install -e '.[trl]'; see .ci/trl)")


def _train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritongym.cli", "train", "--trainer", "trl", *args],
                          capture_output=True, text=True, timeout=timeout)


@needs_trl
def test_smoke_run_tiny_random_two_turns_two_steps(tmp_path):
    out = tmp_path / "run"
    proc = _train("--model", "tiny-random", "--turns", "2", "--steps", "2", "--num-generations", "2",
                  "--max-new-tokens", "16", "--extract", "whole", "--device", "cpu", "--length-lr-decay",
                  "--json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2

    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [entry for entry in logs if "loss" in entry]
    assert [entry["step"] for entry in steps] == [1, 2]
    for entry in steps:
        for key in ("reward", "tritongym/turn_1/reward", "tritongym/turn_2/reward", "tritongym/turn_1/void",
                    "tritongym/trloo_advantage_abs", "tritongym/turns_per_trajectory", "completions/mean_length"):
            assert key in entry, key
        assert entry["tritongym/turns_per_trajectory"] == 2.0
    # ResponseLengthLRDecay drives the LR: the linear warm-up over 10 steps, (s + 1)/10 × 1e-5 in steps 1, 2
    # (TRL's default linear decay would log 1e-5 and 5e-6).
    assert [entry["learning_rate"] for entry in steps] == pytest.approx([1e-6, 2e-6])

    trajectories = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajectories) == 4  # 2 steps × 1 prompt × 2 generations
    verdicts = {str(s) for s in Status} | {"void"}
    rewards = []
    for trajectory in trajectories:
        assert trajectory["problem_id"].startswith("builtin/") and trajectory["turn_budget"] == 2
        assert [t["turn"] for t in trajectory["turns"]] == [0, 1]
        for turn in trajectory["turns"]:
            assert turn["status"] in verdicts
            assert (turn["result"] is None) == (turn["status"] == "void")
            if turn["result"] is not None:  # the evaluator's own verdict object
                assert turn["result"]["status"] == turn["status"] and turn["reward"] == turn["result"]["reward"]
            rewards.append(turn["reward"])
    # Real rewards: a random model's noise earns 0, and with every advantage 0 (β = 0, no weight decay)
    # the GRPO update must be exactly zero; any reward > 0 would have to move the weights.
    if all(r == 0.0 for r in rewards):
        assert all(entry["tritongym/trloo_advantage_abs"] == 0.0 for entry in steps)
        assert summary["parameter_change_l1"] == 0.0
    else:
        assert summary["parameter_change_l1"] > 0.0
    settings = json.loads((out / "run.json").read_text())
    assert settings["trainer"] == "trl" and settings["advantage"] == "trloo"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out / "model")
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    assert model.config.model_type == "qwen2" and tokenizer.eos_token == "<|im_end|>"


@needs_trl
def test_bad_settings_are_usage_errors(tmp_path, capsys):
    from tritongym.cli import main

    base = ["train", "--trainer", "trl", "--model", "tiny-random"]
    assert main([*base, "--num-generations", "1", "--out", str(tmp_path / "a")]) == 2
    assert "num_generations must be >= 2" in capsys.readouterr().err
    assert main([*base, "--only", "no_such_problem", "--out", str(tmp_path / "b")]) == 2
    assert "no_such_problem" in capsys.readouterr().err
    assert main([*base, "--model", str(tmp_path / "missing-model"), "--out", str(tmp_path / "c")]) == 2
    assert "tiny-random" in capsys.readouterr().err  # the message says what --model accepts
    assert main([*base, "--group-filter-std", "-1", "--out", str(tmp_path / "d")]) == 2
    assert "group_filter_std must be >= 0" in capsys.readouterr().err
    assert main([*base, "--dvp-alpha", "1.5", "--out", str(tmp_path / "e")]) == 2
    assert "dvp_alpha must be in (0, 1]" in capsys.readouterr().err
    assert main([*base, "--stop-on", "always", "--out", str(tmp_path / "g")]) == 2
    assert "success rule must be 'never', 'correct'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main([*base, "--advantage", "grpo", "--out", str(tmp_path / "f")])
    assert refused.value.code == 2 and "invalid choice: 'grpo'" in capsys.readouterr().err


@needs_trl
def test_the_advantage_flag_reaches_the_run(tmp_path):
    # The ablation's switch from the command line: the run's settings record it (and a re-run with
    # another estimator in the same folder is refused, as any changed setting is).
    out = tmp_path / "run"
    proc = _train("--model", "tiny-random", "--turns", "1", "--steps", "1", "--num-generations", "2",
                  "--max-new-tokens", "8", "--device", "cpu", "--advantage", "turn_grpo", "--json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["advantage"] == "turn_grpo"
    again = _train("--model", "tiny-random", "--turns", "1", "--steps", "1", "--num-generations", "2",
                   "--max-new-tokens", "8", "--device", "cpu", "--advantage", "trloo", "--out", str(out))
    assert again.returncode == 2 and "advantage" in again.stderr


def test_without_trl_the_error_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['trl'] = None\n"
            "from tritongym.cli import main\n"
            f"sys.exit(main(['train', '--trainer', 'trl', '--model', 'tiny-random', '--out', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "pip install -e '.[trl]'" in proc.stderr and "trl" in proc.stderr
    assert not (tmp_path / "trajectories.jsonl").exists()


@needs_trl
def test_a_saved_tiny_model_reloads_with_the_token_ids_it_was_trained_on(tmp_path):
    # transformers 5 reloads a qwen2 folder's tokenizer as Qwen2Tokenizer, which splits text other
    # than tiny-random's byte-level BPE does: `--model runs/x/model` would then train on other ids.
    from pathlib import Path

    from tritongym.integrations.trl.tiny import tiny_random_model
    from tritongym.integrations.trl.train import _load_model, load_tokenizer
    from tritongym.tasks import builtin_suite

    examples = sorted((Path(__file__).resolve().parents[2] / "examples" / "builtin").glob("*.py"))
    texts = [p.source for p in builtin_suite()] + [path.read_text() for path in examples]
    model, trained = tiny_random_model(texts, seed=0)
    model.save_pretrained(tmp_path)
    trained.save_pretrained(tmp_path)
    _, reloaded = _load_model(str(tmp_path), [], seed=0)
    for text in texts[-3:]:
        assert reloaded(text)["input_ids"] == trained(text)["input_ids"]
    chat = [{"role": "user", "content": "Write the kernel."}, {"role": "assistant", "content": texts[-1]}]
    assert reloaded.apply_chat_template(chat, tokenize=False) == trained.apply_chat_template(chat, tokenize=False)
    assert reloaded.eos_token == trained.eos_token and reloaded.pad_token == trained.pad_token
    assert type(load_tokenizer(str(tmp_path))) is type(reloaded)  # the loader the learning benchmark uses
