"""One rank of a 2-process TRL run on gloo (CPU), launched by ``test_trl_trainer.py`` with torchrun.

Usage: ``torchrun --nproc_per_node 2 tests/integrations/trl_two_process.py OUT_DIR``. Each rank runs
one real GRPO step of `TRLOOGRPOTrainer` on scripted replies; PRS rejects a turn on rank 0's rows only
(the keep probabilities are set per rank, the stand-in for a GPU's coverage profile), so only rank 0
has a turn to drop. Every collective of the hook must still run on both ranks. Each rank writes
``OUT_DIR/rank<k>.json`` with what its hook produced.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.integrations.*

import torch  # noqa: E402
from tests.integrations.trl_support import VOID_REPLY, ScriptedGenerator, make_trainer  # noqa: E402

from tritongym.integrations.trl.rollout import KernelRollout  # noqa: E402
from tritongym.integrations.trl.trainer import TRLOOGRPOTrainer  # noqa: E402
from tritongym.tasks import load_problems  # noqa: E402


class RankKeep:
    """The rollout, with PRS keep probabilities by rank: rank 0's second turns are rejected."""

    def __init__(self, rollout: KernelRollout, rank: int) -> None:
        self.rollout, self.rank, self.__name__ = rollout, rank, "rank_keep"

    def dataset_rows(self):
        return self.rollout.dataset_rows()

    def __call__(self, prompts, trainer):
        out = self.rollout(prompts, trainer)
        out["turn_keep_prob"] = [[1.0, 0.0] if self.rank == 0 else [1.0, 1.0] for _ in prompts]
        return out


class Recording(TRLOOGRPOTrainer):
    def _apply_turn_advantages(self, inputs, output):
        output = super()._apply_turn_advantages(inputs, output)
        self.recorded = {"num_items_in_batch": int(output["num_items_in_batch"]),
                         "local_tokens": int((output["completion_mask"] * output["tool_mask"]).sum()),
                         "local_rows": len(inputs),
                         "prs_rejected_turns": self._metrics["train"]["tritongym/prs_rejected_turns"][-1]}
        return output


def main() -> None:
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    problems = [p for p in load_problems("builtin") if p.name in ("01_scaled_add", "02_leaky_relu")]
    rollout = KernelRollout(problems, turns=2, workers=1,
                            generator=ScriptedGenerator([[VOID_REPLY, VOID_REPLY]] * 2))
    trainer = make_trainer(RankKeep(rollout, rank), out / f"rank{rank}", num_generations=2, steps=1,
                           trainer_cls=Recording)
    trainer.train()
    record = {"rank": rank, "world": trainer.accelerator.num_processes, "global_step": trainer.state.global_step,
              **trainer.recorded}
    rollout.close()
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()  # before exit: gloo's threads otherwise abort the process
    (out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
    # Skip the interpreter's own teardown: in 1 of 3 CI runs (2026-11-26) rank 0 wrote its record
    # and then hung for good in shutdown (py-spy: the main thread past main(), a native thread
    # left), which the test, about collectives, does not check.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
