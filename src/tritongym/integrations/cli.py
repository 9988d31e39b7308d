"""``tritongym train``: training runs through a trainer integration (TRL today; verl has its own launcher)."""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK, EXIT_USAGE = 0, 2


def cmd_train(args: argparse.Namespace) -> int:
    from tritongym.errors import TritongymError
    from tritongym.integrations.trl.train import TrlTrainConfig, require_trl, run_trl_training

    try:
        config = TrlTrainConfig(
            model=args.model, out=args.out, problems=args.problems, only=args.only, turns=args.turns,
            steps=args.steps, num_generations=args.num_generations, prompts_per_step=args.prompts_per_step,
            max_new_tokens=args.max_new_tokens, learning_rate=args.learning_rate, temperature=args.temperature,
            feedback=args.feedback, extract=args.extract, device=args.device, eval_workers=args.eval_workers,
            gamma=args.gamma, prs=not args.no_prs, meaningful_turns=not args.no_meaningful_turns,
            group_filter_std=args.group_filter_std,
            dvp_alpha=args.dvp_alpha, length_lr_decay=args.length_lr_decay, seed=args.seed,
            advantage=args.advantage, stop_on=args.stop_on)
        require_trl()
    except (TritongymError, ValueError) as exc:
        print(f"tritongym train: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        summary = run_trl_training(config, progress=args.progress)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"tritongym train: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(summary))
    else:
        last = summary.get("last_log") or {}
        print(f"{summary['steps']} GRPO steps in {summary['wall_s']} s; last step: reward {last.get('reward')}, "
              f"loss {last.get('loss')}; parameter change (L1) {summary['parameter_change_l1']:.4g}")
        for label in ("trajectories", "metrics", "model"):
            print(f"{label:13s} {summary[label]}")
    return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "train", help="RL training on a problem set through a trainer integration (TRL)",
        description="Multi-turn GRPO with Dr.Kernel's TRLOO turn-level advantages in TRL 1.16: each "
                    "trajectory writes a kernel, reads the evaluator's verdict as feedback (masked out of the "
                    "loss) and revises, for --turns turns; rewards come from the sandboxed evaluator. Writes "
                    "OUT/trajectories.jsonl (the agent runner's schema), OUT/metrics.jsonl (every step's log), "
                    "OUT/summary.json and OUT/model/. Needs pip install -e '.[trl]' torch==2.13.0 from the clone "
                    "(torch installed first; docs/training.md). verl runs through "
                    "verl's own launcher with the tritongym plug-in (docs/training.md).")
    p.add_argument("--trainer", choices=("trl",), required=True, help="the trainer integration")
    p.add_argument("--model", required=True, metavar="PATH_OR_NAME",
                   help="a local model folder, a Hugging Face model id, or 'tiny-random' (a random tiny Qwen2-style "
                        "model and a tokenizer trained in-process: a CPU smoke run without downloads)")
    p.add_argument("--problems", default="builtin", help="as for 'run' (default: %(default)s)")
    p.add_argument("--only", action="append", metavar="NAME", help="only this problem, by name or id (repeatable)")
    p.add_argument("--turns", type=int, default=2, help="turns per trajectory (default: %(default)s)")
    p.add_argument("--steps", type=int, default=2, help="optimizer steps (default: %(default)s)")
    p.add_argument("--num-generations", type=int, default=2, metavar="G",
                   help="trajectories per prompt, the TRLOO group (default: %(default)s)")
    p.add_argument("--prompts-per-step", type=int, default=1, help="prompts per step (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per turn (default: %(default)s)")
    p.add_argument("--learning-rate", type=float, default=1e-5, help="(default: %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    p.add_argument("--feedback", choices=("minimal", "standard", "full"), default="standard",
                   help="feedback detail (default: %(default)s)")
    p.add_argument("--extract", choices=("last", "first", "whole"), default="last",
                   help="which part of a reply is the candidate: the last or first ```python block, or the whole "
                        "reply (default: %(default)s)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where candidates run and the model trains (default: %(default)s)")
    p.add_argument("--eval-workers", type=int, default=1, help="concurrent evaluations (default: %(default)s)")
    p.add_argument("--gamma", type=float, default=1.0, help="TRLOO discount over turns (default: %(default)s)")
    p.add_argument("--advantage", choices=("trloo", "turn_grpo"), default="trloo",
                   help="turn-level advantages: Dr.Kernel's TRLOO (leave-one-out baseline per turn) or "
                        "KernelGYM's multi-turn GRPO (self-included group mean), for ablations "
                        "(default: %(default)s)")
    p.add_argument("--no-prs", action="store_true", help="no profiling-based rejection sampling (PRS needs a GPU's "
                                                         "coverage; without one it keeps every turn anyway)")
    p.add_argument("--no-meaningful-turns", action="store_true",
                   help="keep turns that score <= 0 after an earlier turn scored > 0 in the loss and the TRLOO "
                        "baselines (default: Dr.Kernel's mask_void_turn masks them)")
    p.add_argument("--group-filter-std", type=float, default=None, metavar="STD",
                   help="Dr.Kernel's group filter: a prompt's trajectories leave the loss when their last-turn "
                        "rewards have an (unbiased) std below STD (Dr.Kernel: 1e-3; default: off)")
    p.add_argument("--dvp-alpha", type=float, default=None, metavar="ALPHA",
                   help="dynamic vocabulary pruning: sample with min-p ALPHA and train on the pruned policy's "
                        "log-probs (tritongym.rl.dvp_log_probs; default: off)")
    p.add_argument("--length-lr-decay", action="store_true",
                   help="response-length-triggered LR decay (tritongym.rl.ResponseLengthLRDecay, paper defaults)")
    p.add_argument("--stop-on", default="never", metavar="RULE",
                   help="end a trajectory before --turns: never, correct (at the first correct kernel, as "
                        "KernelGYM's episodes do) or speedup:X (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="run folder (created)")
    p.add_argument("--progress", action="store_true", help="TRL's progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=cmd_train)
