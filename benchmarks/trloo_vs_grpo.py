"""TRLOO against turn-level GRPO where they differ: ragged multi-turn groups (issue 48, section 2).

In ``benchmarks/learning.py`` every trajectory runs every turn, so each turn's group has the same size
N and turn-level GRPO's advantage is exactly (N − 1)/N times TRLOO's: one constant, which Adam's update
nearly ignores. KernelGYM's episodes stop at the first ``ok`` or at an error, so later turns have
fewer members and GRPO's self-included mean shrinks each turn by a *different* factor. This script
measures that with the project's own estimators (``tritongym.rl.trloo_advantages`` and
``turn_grpo_advantages``) on simulated episodes, no model, no evaluator, seconds on a CPU.

Simulation (one prompt group = ``group_size`` independent episodes): at turn t an attempt is ``ok``
with probability ``p_ok[t]`` (rising after feedback), an error with ``p_error[t]``, otherwise wrong.
With ``early_stop`` the episode ends at ``ok`` or at an error; without it (the control, the learning
benchmark's setting) every episode runs every turn. A turn's reward follows tritongym's PR reward
(``tritongym.evaluator.reward``, the default ``RewardConfig`` weights): 0 unless ``ok``; for ``ok``,
``correct_weight`` plus, in the ``gpu`` reward, ``speedup_weight·min(speedup, cap)`` and
``coverage_weight·coverage`` with speedup and coverage drawn uniformly (``cpu``: ``correct_weight``
only, as on a machine without a GPU).

Reference: the leave-one-out reference advantage of member i at turn t is A*[i,t] = G[i,t] − V[t],
its return minus the *expected* return of the other members that reached the turn (V, exact from
the probabilities). Measured per turn, over the members that reached it:

* **bias**: Σ(Â − A*)·A* / ΣA*², the slope of the estimator's advantage on the reference, minus 1.
  Because E[Â | own trajectory] = (1 + bias)·G + constant for both estimators, and a constant
  multiplies a zero-mean score, it is the relative bias of turn t's policy-gradient term:
  E[∇log π·Â] = (1 + bias)·E[∇log π·A*]. Predicted: TRLOO 0 (a lone trajectory gets A = G, baseline
  0: a constant shift, no gradient bias); GRPO −E[1/N] = −(1 − (1 − q)^s)/(s·q), where q is the
  chance of reaching the turn and s the group size (given that a member reached it, the others are
  Binomial(s − 1, q); a lone member gets A ≡ 0).
* **std** of Â, and std / (1 + bias): the noise per unit of the turn's gradient signal; **flips**:
  share of members with Â·A* < 0; **zeroed**: share with Â = 0 and A* ≠ 0; **offset**: mean(Â − A*).
* **mean N**: mean size of the groups that have at least one member at the turn.

Usage::

    python benchmarks/trloo_vs_grpo.py                         # both settings, 5 seeds, 20,000 groups each
    python benchmarks/trloo_vs_grpo.py --seeds 0 1 2 --groups 5000 --reward cpu --plot runs/trloo.png
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from tritongym.evaluator.reward import RewardConfig
from tritongym.rl import trloo_advantages, turn_grpo_advantages, turn_returns

REPO = Path(__file__).resolve().parents[1]

# Success chance rises after each turn's feedback; errors (compile errors, crashes) end the episode.
DEFAULT_P_OK = (0.30, 0.45, 0.55, 0.60)
DEFAULT_P_ERROR = (0.10, 0.08, 0.06, 0.05)
# Ranges of the simulated GPU measurements: speedups from a slowdown to 2x (below the PR cap of 3, so
# the cap is exercised only when a caller widens them), coverage of the candidate's own kernels.
SPEEDUP_RANGE = (0.25, 2.0)
COVERAGE_RANGE = (0.5, 1.0)


@dataclass(frozen=True)
class Setting:
    """One simulated training batch: ``groups`` prompt groups of ``group_size`` episodes."""

    group_size: int = 4
    p_ok: tuple[float, ...] = DEFAULT_P_OK
    p_error: tuple[float, ...] = DEFAULT_P_ERROR
    early_stop: bool = True
    reward: str = "gpu"
    groups: int = 20_000

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size: expected >= 2 (a group of one has no baseline), got {self.group_size}")
        if self.groups < 1:
            raise ValueError(f"groups: expected >= 1, got {self.groups}")
        if not self.p_ok or len(self.p_ok) != len(self.p_error):
            raise ValueError(f"p_ok and p_error: expected one probability per turn each, got {len(self.p_ok)} "
                             f"and {len(self.p_error)}")
        for t, (ok, err) in enumerate(zip(self.p_ok, self.p_error, strict=True)):
            if not (0.0 <= ok <= 1.0 and 0.0 <= err <= 1.0 and ok + err <= 1.0):
                raise ValueError(f"turn {t + 1}: expected p_ok, p_error in [0, 1] with p_ok + p_error <= 1, "
                                 f"got {ok}, {err}")
        if self.reward not in ("gpu", "cpu"):
            raise ValueError(f"reward: expected 'gpu' or 'cpu', got {self.reward!r}")

    @property
    def turns(self) -> int:
        return len(self.p_ok)

    def continue_probability(self, t: int) -> float:
        """Chance that an episode at turn t goes on to turn t + 1."""
        return 1.0 - self.p_ok[t] - self.p_error[t] if self.early_stop else 1.0

    def reach_probability(self, t: int) -> float:
        """q_t: chance that an episode reaches turn t (0-based)."""
        return math.prod(self.continue_probability(k) for k in range(t))


def _mean_min_uniform(low: float, high: float, cap: float) -> float:
    """E[min(U, cap)] for U uniform on [low, high]."""
    if cap >= high:
        return (low + high) / 2
    if cap <= low:
        return cap
    return ((cap * cap - low * low) / 2 + cap * (high - cap)) / (high - low)


def mean_ok_reward(setting: Setting, config: RewardConfig | None = None) -> float:
    """Expected reward of an ``ok`` turn."""
    config = config or RewardConfig()
    if setting.reward == "cpu":
        return config.correct_weight
    return (config.correct_weight
            + config.speedup_weight * _mean_min_uniform(*SPEEDUP_RANGE, config.speedup_cap)
            + config.coverage_weight * sum(COVERAGE_RANGE) / 2)


def expected_returns(setting: Setting) -> list[float]:
    """V[t] = E[G_t | the episode reached turn t] (γ = 1): V_t = p_ok·m + P(continue)·V_{t+1}."""
    m = mean_ok_reward(setting)
    values = [0.0] * (setting.turns + 1)
    for t in range(setting.turns - 1, -1, -1):
        values[t] = setting.p_ok[t] * m + setting.continue_probability(t) * values[t + 1]
    return values[:-1]


def predicted_grpo_bias(setting: Setting, t: int) -> float:
    """−E[1/N] for a member at turn t: N − 1 others ~ Binomial(s − 1, q), E[1/N] = (1 − (1 − q)^s)/(s·q)."""
    q, s = setting.reach_probability(t), setting.group_size
    if q == 0.0:
        return float("nan")
    return -(1.0 - (1.0 - q) ** s) / (s * q)


@dataclass
class Episodes:
    rewards: torch.Tensor  # [n, T] float64, 0 outside the mask
    mask: torch.Tensor  # [n, T] bool, True where the turn was played
    group_ids: torch.Tensor  # [n] int64, group g holds rows g·s … g·s + s − 1
    values: list[float]  # V[t]


def simulate(setting: Setting, seed: int) -> Episodes:
    """Play ``setting.groups × setting.group_size`` episodes."""
    gen = torch.Generator().manual_seed(seed)
    n, turns = setting.groups * setting.group_size, setting.turns
    config = RewardConfig()
    rewards = torch.zeros(n, turns, dtype=torch.float64)
    mask = torch.zeros(n, turns, dtype=torch.bool)
    alive = torch.ones(n, dtype=torch.bool)
    for t in range(turns):
        mask[:, t] = alive
        u = torch.rand(n, generator=gen, dtype=torch.float64)
        ok = u < setting.p_ok[t]
        error = (~ok) & (u < setting.p_ok[t] + setting.p_error[t])
        ok_reward = torch.full((n,), config.correct_weight, dtype=torch.float64)
        if setting.reward == "gpu":
            speedup = SPEEDUP_RANGE[0] + (SPEEDUP_RANGE[1] - SPEEDUP_RANGE[0]) * torch.rand(
                n, generator=gen, dtype=torch.float64)
            coverage = COVERAGE_RANGE[0] + (COVERAGE_RANGE[1] - COVERAGE_RANGE[0]) * torch.rand(
                n, generator=gen, dtype=torch.float64)
            ok_reward += config.speedup_weight * speedup.clamp(max=config.speedup_cap)
            ok_reward += config.coverage_weight * coverage
        rewards[:, t] = torch.where(alive & ok, ok_reward, 0.0)
        if setting.early_stop:
            alive = alive & ~ok & ~error
    group_ids = torch.arange(setting.groups).repeat_interleave(setting.group_size)
    return Episodes(rewards, mask, group_ids, expected_returns(setting))


def advantages(episodes: Episodes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(TRLOO, turn-level GRPO, returns G), each ``[n, T]``, from ``tritongym.rl``."""
    args = (episodes.rewards, episodes.mask, episodes.group_ids)
    return trloo_advantages(*args), turn_grpo_advantages(*args), turn_returns(episodes.rewards, episodes.mask)


@dataclass
class EstimatorStats:
    bias: float  # slope of Â on A*, minus 1
    bias_se: float  # standard error of ``bias`` (groups are independent; delta method over group sums)
    std: float
    flips: float
    zeroed: float
    offset: float


@dataclass
class TurnStats:
    turn: int  # 1-based
    reach: float  # share of episodes that reached the turn
    mean_group_size: float  # over groups with at least one member at the turn
    singleton_share: float  # share of the turn's members that are alone in their group
    predicted_grpo_bias: float
    trloo: EstimatorStats
    grpo: EstimatorStats


def _estimator_stats(adv: torch.Tensor, ref: torch.Tensor, members: torch.Tensor, group_size: int) -> EstimatorStats:
    """``adv``, ``ref``, ``members``: ``[groups, s]`` at one turn (non-members hold 0 in adv and ref)."""
    err = adv - ref
    x = (err * ref * members).sum(1)  # per group Σ(Â − A*)A*
    y = (ref * ref * members).sum(1)  # per group ΣA*²
    ratio = (x.sum() / y.sum()).item()
    se = (torch.sqrt(((x - ratio * y) ** 2).sum()) / y.sum()).item()
    a, r = adv[members], ref[members]
    signal = r != 0
    return EstimatorStats(
        bias=ratio, bias_se=se, std=a.std().item() if a.numel() > 1 else 0.0,
        flips=((a * r < 0) & signal).double().mean().item(),
        zeroed=((a == 0) & signal).double().mean().item(),
        offset=(a - r).mean().item())


def measure(setting: Setting, seed: int) -> list[TurnStats]:
    """Simulate one batch and measure both estimators per turn (the core of this benchmark)."""
    episodes = simulate(setting, seed)
    trloo, grpo, returns = advantages(episodes)
    s = setting.group_size
    stats = []
    for t in range(setting.turns):
        members = episodes.mask[:, t].view(-1, s)
        ref = torch.where(members, returns[:, t].view(-1, s) - episodes.values[t], 0.0)
        sizes = members.sum(1)
        present = sizes > 0
        if not present.any():
            break
        member_sizes = sizes[:, None].expand(-1, s)[members]
        stats.append(TurnStats(
            turn=t + 1, reach=members.double().mean().item(),
            mean_group_size=sizes[present].double().mean().item(),
            singleton_share=(member_sizes == 1).double().mean().item(),
            predicted_grpo_bias=predicted_grpo_bias(setting, t),
            trloo=_estimator_stats(trloo[:, t].view(-1, s), ref, members, s),
            grpo=_estimator_stats(grpo[:, t].view(-1, s), ref, members, s)))
    return stats


@dataclass
class Summary:
    setting: Setting
    seeds: list[int]
    per_seed: list[list[TurnStats]] = field(default_factory=list)
    seconds: float = 0.0


def run(setting: Setting, seeds: list[int]) -> Summary:
    start = time.perf_counter()
    summary = Summary(setting, list(seeds), [measure(setting, seed) for seed in seeds])
    summary.seconds = time.perf_counter() - start
    return summary


def _spread(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, sd


def _cell(values: list[float], digits: int = 3) -> str:
    mean, sd = _spread(values)
    return f"{mean:+.{digits}f} ± {sd:.{digits}f}" if len(values) > 1 else f"{mean:+.{digits}f}"


def _plain(values: list[float], digits: int = 2) -> str:
    mean, sd = _spread(values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def _turn_rows(summary: Summary) -> list[list[TurnStats]]:
    """Rows per turn, each the seeds' stats (turns no seed reached are dropped)."""
    turns = min(len(stats) for stats in summary.per_seed)
    return [[stats[t] for stats in summary.per_seed] for t in range(turns)]


def format_tables(summary: Summary) -> str:
    s = summary.setting
    lines = [f"### {'early stop at ok or error' if s.early_stop else 'full groups (no early stop)'}: "
             f"group size {s.group_size}, {s.turns} turns, p_ok {list(s.p_ok)}, p_error {list(s.p_error)}, "
             f"{s.reward} reward, {s.groups} groups × seeds {summary.seeds} (mean ± sd over seeds)", "",
             "| turn | reached | mean N | lone members | TRLOO bias | GRPO bias | GRPO predicted −E[1/N] |"
             " GRPO gain / turn-1 gain |",
             "|---|---|---|---|---|---|---|---|"]
    rows = _turn_rows(summary)
    first_gain = [1 + st.grpo.bias for st in rows[0]]
    for row in rows:
        gain_ratio = [(1 + st.grpo.bias) / g1 for st, g1 in zip(row, first_gain, strict=True)]
        lines.append(f"| {row[0].turn} | {_plain([st.reach for st in row])} "
                     f"| {_plain([st.mean_group_size for st in row])} "
                     f"| {_plain([st.singleton_share for st in row])} "
                     f"| {_cell([st.trloo.bias for st in row])} | {_cell([st.grpo.bias for st in row])} "
                     f"| {row[0].predicted_grpo_bias:+.3f} | {_plain(gain_ratio)} |")
    lines += ["", "| turn | TRLOO std | GRPO std | TRLOO std / gain | GRPO std / gain | TRLOO flips | GRPO flips "
                  "| TRLOO zeroed | GRPO zeroed | TRLOO offset | GRPO offset |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row[0].turn} | {_plain([st.trloo.std for st in row], 3)} "
                     f"| {_plain([st.grpo.std for st in row], 3)} "
                     f"| {_plain([st.trloo.std / (1 + st.trloo.bias) for st in row], 3)} "
                     f"| {_plain([st.grpo.std / (1 + st.grpo.bias) for st in row], 3)} "
                     f"| {_plain([st.trloo.flips for st in row], 3)} | {_plain([st.grpo.flips for st in row], 3)} "
                     f"| {_plain([st.trloo.zeroed for st in row], 3)} | {_plain([st.grpo.zeroed for st in row], 3)} "
                     f"| {_cell([st.trloo.offset for st in row])} | {_cell([st.grpo.offset for st in row])} |")
    se = max(st.trloo.bias_se for row in rows for st in row)
    lines += ["", f"(largest per-seed standard error of a bias: {se:.4f}; {summary.seconds:.1f} s)"]
    return "\n".join(lines)


def plot(summaries: list[Summary], path: Path) -> bool:
    """Bar chart of 1 + bias (each turn's gradient scale) per estimator; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(summaries), figsize=(5.5 * len(summaries), 4), squeeze=False)
    for ax, summary in zip(axes[0], summaries, strict=True):
        rows = _turn_rows(summary)
        turns = [row[0].turn for row in rows]
        for offset, name, color in ((-0.2, "trloo", "tab:blue"), (0.2, "grpo", "tab:orange")):
            gains = [_spread([1 + getattr(st, name).bias for st in row]) for row in rows]
            ax.bar([t + offset for t in turns], [g[0] for g in gains], width=0.4, yerr=[g[1] for g in gains],
                   color=color, label="TRLOO" if name == "trloo" else "turn-level GRPO")
        ax.plot([t + 0.2 for t in turns], [1 + row[0].predicted_grpo_bias for row in rows], "k_", markersize=20,
                label="GRPO predicted 1 − E[1/N]")
        for t, row in zip(turns, rows, strict=True):
            ax.text(t, 1.04, f"N̄={_spread([st.mean_group_size for st in row])[0]:.2f}", ha="center", fontsize=8)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(turns)
        ax.set_xlabel("turn")
        ax.set_ylabel("gradient scale of the turn (1 + bias)")
        ax.set_ylim(0, 1.35)
        ax.set_title("early stop at ok / error" if summary.setting.early_stop else "full groups (control)")
        ax.legend(loc="upper center", ncol=3, fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True)
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _probabilities(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated probabilities, e.g. 0.3,0.45,0.55, got {text!r}"
                                         ) from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--groups", type=int, default=20_000, help="prompt groups per seed (default 20000)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--p-ok", type=_probabilities, default=DEFAULT_P_OK,
                        help="per-turn chance of ok, comma-separated (default %(default)s)")
    parser.add_argument("--p-error", type=_probabilities, default=DEFAULT_P_ERROR,
                        help="per-turn chance of an episode-ending error (default %(default)s)")
    parser.add_argument("--reward", choices=("gpu", "cpu"), default="gpu",
                        help="gpu: PR reward with simulated speedup and coverage; cpu: correct_weight for ok")
    parser.add_argument("--plot", type=Path, help="write a PNG (needs matplotlib)")
    parser.add_argument("--json", type=Path, help="write every per-seed number as JSON")
    args = parser.parse_args(argv)
    try:
        early = Setting(group_size=args.group_size, p_ok=args.p_ok, p_error=args.p_error, early_stop=True,
                        reward=args.reward, groups=args.groups)
    except ValueError as exc:
        parser.error(str(exc))
    summaries = [run(early, args.seeds), run(replace(early, early_stop=False), args.seeds)]
    print(f"commit {_commit()}, {platform.machine()} {platform.processor() or ''} "
          f"python {sys.version.split()[0]}, torch {torch.__version__}")
    for summary in summaries:
        print()
        print(format_tables(summary))
    if args.plot:
        print(f"\nplot: {args.plot}" if plot(summaries, args.plot) else "\nplot skipped: matplotlib is not installed")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(s) for s in summaries], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
