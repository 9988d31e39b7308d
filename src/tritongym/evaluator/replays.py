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

#: Most events one forward's log may hold (`launchlog.MAX_EVENTS`, enforced here, by the receiver).
MAX_LOG_EVENTS = 20_000
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
    # The cap is the receiver's: the sender is the candidate's process and may ignore its own.
    if len(log["events"]) > MAX_LOG_EVENTS:
        return f"more than {MAX_LOG_EVENTS} kernel launches and PyTorch ops in one forward"
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


#: Bits of one buffer reference's identity (which buffer an argument names): a choice among the
#: log's buffers, charged as one byte however few buffers there are.
REFERENCE_BITS = 8
#: Bits of one event's identity (which op or kernel, among the few thousand ATen ops and the file's
#: kernels) when the other trials do not have that event; its fields are charged besides.
EVENT_BITS = 16
#: The most host information (bits) a log whose counterfactual replay fails may carry: the old
#: allowance of 64 values, in 64-bit words (`value_budget_bits`).
HOST_BITS_CAP = 64 * 64
#: Share of an answer's information that value-dependent host data may carry: 1/16.
ANSWER_SHARE_DIVISOR = 16


def value_bits(value: Any) -> int:
    """Information in one logged leaf, in bits, at the width the log gives it.

    Integers by their magnitude (a count of 1,000 rows is 11 bits; two float32 answers packed
    in one int64 are 64), floats as the doubles they are on the wire, strings at 8 bits a
    character, flags and None at one bit.
    """
    if value is None or type(value) is bool:
        return 1
    if type(value) is int:
        return abs(value).bit_length() + 1
    if type(value) is float:
        return 64
    if type(value) is str:
        return 8 * max(1, len(value))
    if isinstance(value, tuple) and value and value[0] == "buffer":
        return REFERENCE_BITS
    return 64


def _blob_digest(blob: Any) -> tuple[str, int]:
    """(sha256 of the bytes, bytes) of one shipped buffer; anything but bytes is opaque."""
    if isinstance(blob, torch.Tensor):
        data = blob.contiguous().numpy().tobytes() if blob.numel() else b""
        return hashlib.sha256(data).hexdigest(), len(data)
    return "?", 0


class _Canonical:
    """One log as comparable leaves: every field it carries, buffers named by what they are.

    A buffer reference is compared by the buffer's identity, not its number in this log: a
    problem input or model state by its index, a buffer shipped from the host by its content's
    digest (so different bytes differ), a buffer an event made by that event's signature and
    occurrence (so one extra allocation at a first call does not rename every later buffer).
    """

    def __init__(self, log: dict[str, Any], launch_meta: bool) -> None:
        self.launch_meta = launch_meta
        buffers = log.get("buffers") if isinstance(log.get("buffers"), list) else []
        blobs = log.get("blobs") if isinstance(log.get("blobs"), list) else []
        self.blobs = [_blob_digest(b) for b in blobs]
        self.names: dict[int, tuple[Any, ...]] = {}
        for number, entry in enumerate(buffers):
            if not isinstance(entry, dict):
                self.names[number] = ("buffer", "malformed", number)
            elif entry.get("kind") in ("input", "state"):
                self.names[number] = ("buffer", entry.get("kind"), entry.get("index"), entry.get("nbytes"))
            elif entry.get("kind") == "external":
                blob = entry.get("blob")
                digest = self.blobs[blob] if type(blob) is int and 0 <= blob < len(self.blobs) else ("?", 0)
                self.names[number] = ("buffer", "external", digest[0], entry.get("nbytes"))
        events = log.get("events") if isinstance(log.get("events"), list) else []
        self.signatures: list[Any] = []
        self.events: list[list[tuple[str, Any]]] = []
        seen: dict[Any, int] = {}
        for event in events:
            if not isinstance(event, dict):
                continue
            signature = ("op", event.get("op")) if "op" in event else ("launch", str(event.get("launch")))
            occurrence = seen.get(signature, 0)
            seen[signature] = occurrence + 1
            for number in _made_buffers(event.get("out")):
                if number not in self.names:
                    self.names[number] = ("buffer", "new", signature, occurrence)
            self.signatures.append(signature)
            self.events.append([])
        position = 0
        for event in events:
            if not isinstance(event, dict):
                continue
            leaves = self.events[position]
            fields = ("args", "out") if ("launch" in event and not launch_meta) else ("grid", "kwargs", "args", "out")
            for name in fields:
                self._leaves(event.get(name), name, leaves)
            position += 1
        self.rest: list[tuple[str, Any]] = []
        self._leaves(log.get("outputs"), "outputs", self.rest)
        self._leaves(log.get("kernels"), "kernels", self.rest)
        extra = {k: v for k, v in log.items() if k not in ("events", "buffers", "blobs", "outputs", "kernels", "error")}
        self._leaves(extra, "log", self.rest)

    def _leaves(self, value: Any, path: str, out: list[tuple[str, Any]], depth: int = 0) -> None:
        if depth > 12:
            out.append((path, "deep"))
            return
        if isinstance(value, dict):
            if "T" in value:
                number = value.get("T")
                out.append((path + ".T", self.names.get(number, ("buffer", "unknown", number))
                            if type(number) is int else ("buffer", "unknown", str(number)[:20])))
                for key in sorted(k for k in value if k != "T"):
                    self._leaves(value[key], f"{path}.{key}", out, depth + 1)
                return
            for key in sorted(value, key=str):
                self._leaves(value[key], f"{path}.{key}", out, depth + 1)
            if not value:
                out.append((path, "{}"))
            return
        if isinstance(value, list):
            out.append((path + "#", len(value)))
            for i, item in enumerate(value):
                self._leaves(item, f"{path}[{i}]", out, depth + 1)
            return
        out.append((path, value if type(value) in (int, float, str, bool) or value is None else repr(value)[:80]))


def _made_buffers(out: Any) -> list[int]:
    """Buffer numbers an event's results refer to (the buffers it made, or wrote)."""
    found: list[int] = []
    stack = [out]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if type(value.get("T")) is int:
                found.append(value["T"])
            stack.extend(v for k, v in value.items() if k != "T")
        elif isinstance(value, list):
            stack.extend(value)
    return found


@dataclass
class HostInformation:
    """What one trial's log carries that its peers' logs do not share, in bits.

    `bits` counts every differing leaf of every field of the log (arguments, grids, keywords,
    results' views, which buffer each reference names, the kernel table's module constants, the
    outputs' structure) at its width (`value_bits`), every event the peers do not have whole,
    and 8 bits per byte of each shipped buffer whose content differs. `peers` is how many logs
    it was compared with (0: nothing to compare, the counterfactual replay decides alone).
    """

    bits: int = 0
    peers: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, bits: int, example: str) -> None:
        self.bits += bits
        if len(self.examples) < 3:
            self.examples.append(example)


def host_information(logs: list[dict[str, Any]], position: int,
                     same_configs: list[int] | None = None) -> HostInformation:
    """The information the log at `position` carries that varies between trials (`HostInformation`).

    A value the same in every trial's log (a block size, ``eps``, a shape, a table made in
    ``__init__``) carries nothing about this trial's inputs; one that differs was computed from
    them on the host. Events are aligned by what they are (op name or kernel), not by position.
    Autotune changes grids and block sizes legitimately: trials that ran the same configs are
    compared whole; without such a peer, launches are compared without their grid and keywords.
    """
    import difflib

    whole = same_configs is not None or len(logs) < 2
    peers = [i for i in (same_configs if same_configs is not None else range(len(logs))) if i != position]
    report = HostInformation(peers=len(peers))
    if not peers:
        return report
    mine = _Canonical(logs[position], launch_meta=whole)
    differing: dict[tuple[int, str], Any] = {}
    unmatched: set[int] = set()
    rest_differing: dict[str, Any] = {}
    for peer in peers:
        other = _Canonical(logs[peer], launch_meta=whole)
        matcher = difflib.SequenceMatcher(None, mine.signatures, other.signatures, autojunk=False)
        for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
            if tag != "equal":
                unmatched.update(range(i1, i2))
                continue
            for offset in range(i2 - i1):
                theirs = dict(other.events[j1 + offset])
                for path, value in mine.events[i1 + offset]:
                    if path not in theirs or theirs[path] != value or type(theirs[path]) is not type(value):
                        differing[(i1 + offset, path)] = value
        theirs_rest = dict(other.rest)
        for path, value in mine.rest:
            if path not in theirs_rest or theirs_rest[path] != value or type(theirs_rest[path]) is not type(value):
                rest_differing[path] = value
    charged_blobs: set[str] = set()

    def charge(value: Any, where: str) -> None:
        if isinstance(value, tuple) and value[:2] == ("buffer", "external") and value[2] not in charged_blobs:
            charged_blobs.add(value[2])
            size = next((n for d, n in mine.blobs if d == value[2]), 0)
            report.note(8 * size, f"{size} bytes shipped from the host, different in each trial ({where})")
        report.note(value_bits(value), f"{where} = {str(value)[:40]}, different in each trial")

    for event in sorted(unmatched):
        what = mine.signatures[event]
        report.note(EVENT_BITS, f"an event ({what[1]}) the other trials do not have")
        for path, value in mine.events[event]:
            charge(value, f"{what[1]} {path}")
    for (event, path), value in sorted(differing.items(), key=lambda item: item[0]):
        charge(value, f"{mine.signatures[event][1]} {path}")
    for path, value in rest_differing.items():
        charge(value, path)
    return report


def answer_bits(expected: Any) -> int:
    """A lower bound on the information an answer within tolerance holds, in bits.

    An element within a 1e-2 relative tolerance needs at least log2(100) ~ 7 significant bits and
    its sign: 8 bits for every floating-point element (ignoring the exponent), 8 for integers, 1
    for a flag. Whatever carries an answer must carry at least this much.
    """
    bits = 0
    stack = [expected]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            bits += value.numel() * (1 if value.dtype == torch.bool else 8)
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
    return bits


def value_budget_bits(expected: Any) -> int:
    """Host information a log may carry when its counterfactual replay fails (`HostInformation`).

    Such a log is value-dependent (jagged offsets, a count read with ``.item()``, a grid from a
    maximum length): it may carry at most 1/16 of the answer's information (`answer_bits`), and
    never more than `HOST_BITS_CAP`, so the kernels replayed from it must compute the rest; a
    scalar or a small row of results gets no budget at all.
    """
    return min(HOST_BITS_CAP, answer_bits(expected) // ANSWER_SHARE_DIVISOR)
