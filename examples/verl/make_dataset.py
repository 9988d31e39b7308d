"""Write verl's RL dataset (train/val Parquet) for the ``tritongym_kernel`` agent loop.

One row per problem, in the columns verl's ``RLHFDataset`` reads: ``prompt`` (chat messages: the task
as tritongym's templates render it, so verl's prompt-length filter measures what the model will see),
``data_source``, ``agent_name`` (``tritongym_kernel``), ``reward_model`` (unused: the agent loop sets
the reward) and ``extra_info`` with the problem's id and source (``problem``, ``problem_source``), so
the agent-loop workers need no copy of the problem set.

    python examples/verl/make_dataset.py --problems builtin --out ~/data/tritongym --val-fraction 0.2
    python examples/verl/make_dataset.py --problems ../shared/datasets/kernelbench/kernelbench_l1-l3.jsonl \\
        --level 1 --level 2 --out ~/data/tritongym
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from tritongym.env import KernelEnv
from tritongym.tasks import load_problems


def rows(problems: list) -> list[dict]:
    """The dataset rows for these problems (the order given)."""
    out = []
    for index, problem in enumerate(problems):
        env = KernelEnv(problem)
        messages, _ = env.reset(options={"problem": problem})
        out.append({
            "data_source": "tritongym",
            "prompt": messages,
            "agent_name": "tritongym_kernel",
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"index": index, "problem": problem.problem_id, "problem_source": problem.source},
        })
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="builtin", help="a problem-set spec (builtin, a folder, a JSONL)")
    parser.add_argument("--level", type=int, action="append", help="KernelBench levels to keep (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="folder for train.parquet and val.parquet")
    parser.add_argument("--val-fraction", type=float, default=0.1, help="share of problems held out (default 0.1)")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed for the split")
    args = parser.parse_args(argv)
    if not 0 <= args.val_fraction < 1:
        parser.error(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    import pandas as pd

    problems = load_problems(args.problems, levels=args.level)
    random.Random(args.seed).shuffle(problems)
    n_val = max(1, round(len(problems) * args.val_fraction)) if args.val_fraction > 0 else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, subset in (("val", problems[:n_val]), ("train", problems[n_val:])):
        pd.DataFrame(rows(subset)).to_parquet(args.out / f"{name}.parquet")
        print(f"{args.out / f'{name}.parquet'}: {len(subset)} problems")


if __name__ == "__main__":
    main()
