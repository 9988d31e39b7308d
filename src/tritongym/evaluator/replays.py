"""The parent's side of the clean room: which trials to replay, what the replays decide.

The candidate worker is treated as compromised once candidate code has run: anything it keeps
or reports (op traces, launch records, keys, hooks) can be forged with raw memory. So the
verdict's integrity evidence comes from a process where no candidate code ever ran:

1. every trial the candidate answers comes with a **launch log** (`launchlog`): its Triton
   launches and ATen ops, with buffers as references;
2. after the candidate has answered *all* trials (and passed every candidate-side filter), the
   parent picks trials to replay in secret (`choose_replays`): one of every input family (a task
   trial and each perturbed family), at least two, plus one per autotune config the trials ran;
3. the clean-room worker (`evaluator/cleanroom/worker.py`) re-executes each chosen log on the parent's own
   copy of the inputs, with kernels rebuilt from the hashed source;
4. the parent compares the **clean room's** outputs with the reference, measures the PyTorch
   work the clean room executed against the reference's, and charges the host data the logs
   carry (`host_origin`) against the host budget.

What each stops, by construction: work done anywhere the log does not show (a helper thread,
a grid callable, raw memory writes, a tuple subclass computing at iteration, a forged trace)
is not re-executed, so its result is missing from the clean room's outputs
(``evidence_mismatch``); a log that shows PyTorch doing the work is measured as such
(``pytorch_fallback``); answers computed on the host must enter the log as data, which varies with
the trial and is charged (``host_compute``); kernels are rebuilt from the checked text in a
namespace of Triton only (``python_in_kernel``), so nothing the candidate's module did at import
reaches them.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

#: Trials replayed at least (the issue's floor for the CPU tier; a GPU replays the same).
MIN_REPLAYS = 2


@dataclass
class TrialRecord:
    """What the parent keeps of one answered trial until the clean room has replayed."""

    index: int
    family: str
    inputs: Any
    expected: Any
    compute_work: tuple[int, int]
    log: dict[str, Any]
    #: the reference's elements copied into a new layout, and into a new dtype (`optrace.op_moves`)
    moved_elements: tuple[int, int] = (0, 0)
    configs: list[tuple[str, int]] = field(default_factory=list)  # (autotuned kernel, config position)
    #: external buffers whose bytes must be shown not to matter (replayed poisoned)
    poison: list[int] = field(default_factory=list)
    #: the float64 evaluation, and the mean of the earlier trials' expected outputs of this family:
    #: the replay's outputs get every check the candidate's got (`parent.review_outputs`)
    truth: Any = None
    previous_mean: list[torch.Tensor] | None = None
    #: the candidate's outputs and the parent's review of them (`parent.OutputReview`): a replay
    #: that gives the same bytes gets the same review without recomputing it
    candidate_outputs: Any = None
    candidate_review: Any = None


def log_error(log: Any) -> str | None:
    """Why a trial's log cannot be replayed (the candidate worker's own words, or malformed)."""
    if not isinstance(log, dict):
        return "the candidate worker sent no launch log"
    error = log.get("error")
    if error is not None:
        return str(error)[:500]
    if not isinstance(log.get("events"), list) or not isinstance(log.get("buffers"), list):
        return "the launch log is malformed"
    return None


def choose_replays(records: list[TrialRecord], rng: secrets.SystemRandom | None = None,
                   minimum: int = MIN_REPLAYS) -> list[int]:
    """Positions in `records` to replay, chosen after every trial was answered.

    One trial of every input family that ran (the task distribution and each perturbed family),
    at least `minimum` in all (all when there are fewer), then one trial per (autotuned kernel,
    config) that ran, preferring perturbed families: no family and no config a trial ran goes
    unreplayed. Within the task distribution one trial of several is replayed: a candidate wrong
    on some task inputs that hides PyTorch answers in those trials escapes when none of them is
    drawn (docs/integrity.md, the evidence table's "what remains forgeable").
    """
    rng = rng or secrets.SystemRandom()
    if not records:
        return []
    chosen: list[int] = []
    # One trial of every input family, not one of the perturbed ones: a kernel that is wrong on one
    # family can be honest everywhere else and hide a PyTorch answer in that family's trial, with a
    # forged log (the live trace is the candidate's to edit); with one perturbed family of three
    # replayed, it got `ok` in 5 of 9 evaluations, 2 in 3 expected (`harness_clean_erase_one_family.py`).
    for family in sorted({r.family for r in records}):
        chosen.append(rng.choice([i for i, r in enumerate(records) if r.family == family]))
    rest = [i for i in range(len(records)) if i not in chosen]
    rng.shuffle(rest)
    while len(chosen) < min(minimum, len(records)) and rest:
        chosen.append(rest.pop())
    covered = {config for i in chosen for config in records[i].configs}
    wanted = {config for record in records for config in record.configs} - covered
    for config in sorted(wanted):
        if config in covered:
            continue
        holders = [i for i, r in enumerate(records) if config in r.configs]
        preferred = [i for i in holders if records[i].family != "get_inputs"] or holders
        pick = rng.choice(preferred)
        chosen.append(pick)
        covered |= set(records[pick].configs)
    return sorted(set(chosen))


def _scalars(value: Any, out: list[Any]) -> list[Any]:
    """Every number, string and grid size in a log value, in order (tensor references skipped,
    except their shapes and offsets, which are host data too)."""
    if isinstance(value, dict):
        if "T" in value:
            out.extend(["o", value.get("o")])
            for item in value.get("s") or []:
                out.append(item)
            return out
        for key in sorted(value):
            _scalars(value[key], out)
        return out
    if isinstance(value, list):
        for item in value:
            _scalars(item, out)
        return out
    out.append(value)
    return out


def _event_scalars(log: dict[str, Any], launch_meta: bool = True) -> list[Any]:
    values: list[Any] = []
    for event in log.get("events") or []:
        if isinstance(event, dict):
            values.append(event.get("op") or event.get("launch"))
            if launch_meta or "op" in event:
                _scalars(event.get("grid"), values)
                _scalars(event.get("kwargs"), values)
            _scalars(event.get("args"), values)
            _scalars(event.get("out"), values)
    _scalars(log.get("outputs"), values)
    return values


def _external_digests(log: dict[str, Any]) -> list[tuple[str, int]]:
    blobs = log.get("blobs") or []
    digests = []
    for blob in blobs:
        if isinstance(blob, torch.Tensor):
            data = blob.contiguous().numpy().tobytes() if blob.numel() else b""
            digests.append((hashlib.sha256(data).hexdigest(), max(1, blob.numel() // 4)))
        else:
            digests.append(("?", 1))
    return digests


@dataclass
class HostOrigin:
    """Host data a log carries that depends on the trial (elements, with examples).

    `external` lists the log's external buffers (by blob number) whose bytes differ between
    trials, and `external_elements` their share of `elements`: a buffer kept from an earlier call
    (a cached workspace) differs too, and is host data only if its content reaches the outputs,
    which the clean room tests by replaying with those bytes poisoned (`dead_content`).
    """

    elements: int = 0
    examples: list[str] = field(default_factory=list)
    external: list[int] = field(default_factory=list)
    external_elements: int = 0


def host_origin(logs: list[dict[str, Any]], position: int, same_configs: list[int] | None = None) -> HostOrigin:
    """What the log at `position` carries from the host that the other trials' logs do not share.

    A value that is the same in every trial's log (a block size, ``eps``, a shape, a table made
    in ``__init__``) carries no information about this trial's inputs; one that differs was
    computed from them on the host. Each differing scalar or grid size counts one element, each
    differing external buffer its size in 4-byte elements, and a log longer than the others
    counts its extra values.
    """
    # Autotune rotates configs over the trials: a launch's grid and keyword arguments (block
    # sizes, warps) differ with the config. Trials that ran the same configs are compared whole;
    # without such a peer, launches are compared by their positional arguments only.
    whole = same_configs is not None or len(logs) < 2
    peers = [i for i in (same_configs if same_configs is not None else range(len(logs))) if i != position]
    mine = _event_scalars(logs[position], launch_meta=whole)
    others = [_event_scalars(logs[i], launch_meta=whole) for i in peers]
    report = HostOrigin()
    if not others:
        return report
    for slot, value in enumerate(mine):
        if any(slot >= len(other) or other[slot] != value for other in others):
            report.elements += 1
            if len(report.examples) < 3:
                report.examples.append(f"a logged value ({str(value)[:40]}) that differs between trials")
    shortest = min(len(other) for other in others)
    if len(mine) < shortest:
        report.elements += shortest - len(mine)
    blobs = _external_digests(logs[position])
    other_blobs = [_external_digests(logs[i]) for i in peers]
    for slot, (digest, elements) in enumerate(blobs):
        if any(slot >= len(other) or other[slot][0] != digest for other in other_blobs):
            report.elements += elements
            report.external.append(slot)
            report.external_elements += elements
            if len(report.examples) < 3:
                report.examples.append(f"a tensor of unknown origin ({elements} elements) made on the host, "
                                       "different in each trial")
    return report
