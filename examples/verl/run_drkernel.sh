#!/usr/bin/env bash
# Dr.Kernel-style multi-turn RL for Triton kernels with verl 0.9.1 + tritongym: TRLOO advantages,
# meaningful-turn masking, MRS mismatch rejection and PRS per turn before the advantages (the
# `tritongym` trainer mode; rejected turns keep their rewards in their peers' baselines, as released),
# PR (profiling-based reward), group filtering on last-turn rewards (verl's own), 3 turns, the
# paper's hyper-parameters. Where this differs from the released KernelGYM recipe: docs/training.md.
#
# Loss scale: KernelGYM sums each turn row's token losses and divides by 1000 x the nominal turn
# rows of the batch (16 prompts x 16 samples x 3 turns); verl's seq-mean-token-sum-norm divides by
# loss_scale_factor x the nominal trajectories (16 x 16), so 1000 x 3 turns = 3000 gives the same
# gradient (tests/integrations/test_verl_losses.py). Change it with max_turns.
#
# UNVERIFIED: never run on GPUs here. Every key below exists in verl 0.9.1's config schema
# (tests/integrations/test_verl_recipe.py composes this exact list onto verl's ppo_trainer config and
# builds its dataclasses); the training run itself needs a GPU cluster.
#
#   pip install -e '.[verl]' vllm==<verl's pin>      # on every node (the plug-in loads on `import verl`)
#   python examples/verl/make_dataset.py --problems <set> --out $DATA_DIR
#   MODEL_PATH=/ckpt/cold-start-sft TRITONGYM_EVAL_URL=http://evalhost:8000 bash examples/verl/run_drkernel.sh
#
# Extra hydra overrides can follow on the command line (they win).
set -euo pipefail

MODEL_PATH=${MODEL_PATH:?set MODEL_PATH to the cold-start SFT checkpoint (Dr.Kernel starts RL from it)}
DATA_DIR=${DATA_DIR:-$HOME/data/tritongym}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
HERE=$(cd "$(dirname "$0")" && pwd)

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=trloo \
    algorithm.gamma=1.0 \
    algorithm.lam=1.0 \
    algorithm.use_kl_in_reward=False \
    algorithm.filter_groups.enable=True \
    algorithm.filter_groups.metric=tritongym/last_reward \
    data.train_files=$DATA_DIR/train.parquet \
    data.val_files=$DATA_DIR/val.parquet \
    data.train_batch_size=16 \
    data.max_prompt_length=10240 \
    data.max_response_length=28672 \
    data.filter_overlong_prompts=True \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path=$MODEL_PATH \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.optim.clip_grad=1.0 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_epochs=1 \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40960 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.clip_ratio_c=3.0 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm \
    actor_rollout_ref.actor.loss_scale_factor=3000 \
    actor_rollout_ref.actor.policy_loss.loss_mode=tritongym_ppo \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.ulysses_sequence_parallel_size=4 \
    actor_rollout_ref.actor.fsdp_config.param_offload=True \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=16 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.top_p=1.0 \
    actor_rollout_ref.rollout.top_k=-1 \
    actor_rollout_ref.rollout.calculate_log_probs=True \
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=40960 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.75 \
    actor_rollout_ref.rollout.val_kwargs.n=8 \
    actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
    actor_rollout_ref.rollout.val_kwargs.top_p=0.95 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.agent.default_agent_loop=tritongym_kernel \
    actor_rollout_ref.rollout.agent.agent_loop_config_path=$HERE/agent_loops.yaml \
    trainer.v1.trainer_mode=tritongym \
    +tritongym.meaningful_turns.enable=True \
    +tritongym.mrs.enable=True \
    +tritongym.mrs.lower=0.999 \
    +tritongym.mrs.upper=1.001 \
    +tritongym.mrs.veto_threshold=1e-4 \
    +tritongym.prs.enable=True \
    trainer.nnodes=$NNODES \
    trainer.n_gpus_per_node=$GPUS_PER_NODE \
    trainer.save_freq=10 \
    trainer.test_freq=10 \
    trainer.val_before_train=True \
    trainer.total_epochs=1000 \
    trainer.project_name=tritongym \
    trainer.experiment_name=drkernel-trloo-mrs-pr-prs \
    trainer.logger='["console","wandb"]' \
    +ray_kwargs.ray_init.runtime_env.env_vars.TRITONGYM_EVAL_URL=${TRITONGYM_EVAL_URL:-local} \
    "$@"
