"""The reference worker: builds the task's `Model` and computes expected outputs.

A trusted process of its own (spawned, never forked): it holds the problem, the secret seeds
it is given and the expected outputs, and it never sees candidate code. The parent asks it for
trial inputs and expected outputs, forwards only the inputs to the candidate worker, and
compares in the parent. It runs the problem's code, so a broken problem fails here and becomes a
`ProblemError` in the parent, never a verdict against a candidate.

On a GPU it pins IEEE float32 (TF32 off for matmul and cuDNN, `device.pin_ieee_fp32`) before
the problem is loaded: expected outputs and the baseline's speed are float32's, not TF32's. It
also allocates its timing buffers at setup (the L2 flush buffer, the bandwidth and matmul-rate
probes), before the candidate has run, so a candidate that fills the GPU cannot make them fail.

Protocol (parent → reference): ``setup {weight_seed}`` → ``ready {init_inputs, fp32}`` (or
``device_error {message}`` when CUDA does not work, which the parent raises as `EvaluatorError`);
``trial {seed, family, truth}`` → ``trial {inputs, expected, compute_ops, finite, truth}``
(``truth`` is the float64 evaluation of the same inputs, for the precision check, or None
when asked not to or when the model cannot run in float64); ``expected_for {seed}`` →
``expected {expected}`` (the output for the timing inputs of that seed, to recheck a timed
candidate output); the timing requests of `timing.TimingSession`; ``exit``.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import torch

from tritongym.evaluator.common.channel import Channel
from tritongym.evaluator.common.device import pin_ieee_fp32, probe_device, tf32_enabled
from tritongym.evaluator.common.families import all_finite, forward_parameter_names, perturb
from tritongym.evaluator.worker import startup as common
from tritongym.evaluator.worker.optrace import OpTrace
from tritongym.evaluator.worker.timing import (
    RepTimer,
    TimingSession,
    measure_copy_bandwidth,
    measure_matmul_rate,
    timing_inputs,
)

#: torch's aten ops whose FLOPs no algorithm a candidate would use avoids on dense operands
#: (the physics floor of `plausibility` is built on them).
DENSE_MATMUL_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm"})


def _allocation_failed(exc: BaseException) -> bool:
    """Whether `exc` is a failed host allocation (Python's, or torch's CPU allocator's)."""
    return isinstance(exc, MemoryError) or "can't allocate memory" in str(exc)


class ReferenceWorker:
    def __init__(self, channel: Channel, source: str, device: torch.device) -> None:
        self.channel = channel
        self.source = source
        self.device = device
        self.module = None
        self.model = None
        self.model64: torch.nn.Module | None = None
        self.model64_error: str | None = None
        self.input_names: list[str | None] = []
        self.timing: TimingSession | None = None
        self.timer: RepTimer | None = None
        self.measured: dict[str, float] | None = None
        self.fp32 = pin_ieee_fp32() if device.type == "cuda" else None

    def setup(self, weight_seed: int) -> None:
        if self.device.type == "cuda":
            # A driver or device failure is the machine's, not the problem's (ReferenceRunner
            # raises EvaluatorError for it).
            failure = probe_device(self.device, triton_kernel=False)
            if failure is not None:
                self.channel.send("device_error", {"message": failure})
                return
        self.module = common.load_module(self.source, "reference_problem")
        common.seed_everything(weight_seed)
        init_inputs = self.module.get_init_inputs()
        args, kwargs = common.split_init_inputs(init_inputs)
        common.seed_everything(weight_seed)
        model = self.module.Model(*common.to_device(args, self.device), **common.to_device(kwargs, self.device))
        self.model = model.to(self.device)
        # Input families keep metadata (scales, zero points, masks, indices) as it is, by the
        # name of the forward parameter it is passed as.
        self.input_names = forward_parameter_names(self.model)
        if self.device.type == "cuda":
            # Before the candidate's trials: its allocations cannot starve these later.
            self.timer = RepTimer(self.device)
            self.measured = {"bytes_per_s": measure_copy_bandwidth(self.device),
                             "flops_per_s": measure_matmul_rate(self.device)}
        fp32 = None
        if self.fp32 is not None:
            fp32 = self.fp32 if not tf32_enabled() else "the problem switched TF32 back on"
        self.channel.send("ready", {"init_inputs": init_inputs, "fp32": fp32})

    def trial(self, seed: int, family: str, want_truth: bool) -> None:
        common.seed_everything(seed)
        inputs = self.module.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"get_inputs() must return a list, got {type(inputs).__name__}")
        inputs = perturb(list(inputs), family, seed, names=self.input_names)
        # The model gets its own copies: a reference that writes into its inputs must not
        # change what the candidate receives.
        device_inputs = common.to_device(inputs, self.device, copy=True)
        trace = OpTrace()
        with torch.no_grad(), trace:
            expected = self.model(*device_inputs)
        common.synchronize(self.device)
        finite = all_finite(expected)
        truth = self.truth(inputs) if want_truth and finite else None
        self.channel.send("trial", {
            "inputs": inputs, "expected": expected, "compute_ops": trace.compute_ops(),
            "compute_work": [trace.compute_elements, trace.compute_flops], "moved_elements": trace.moved_elements,
            "finite": finite, "truth": truth,
        })

    def truth(self, inputs: list[Any]) -> Any:
        """The float64 output on the same inputs (None if the model cannot run in float64)."""
        if self.model64_error is not None:
            return None
        try:
            if self.model64 is None:
                self.model64 = copy.deepcopy(self.model).double()
            as64 = [
                t.to(self.device, dtype=torch.float64) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point
                else common.to_device(t, self.device, copy=True)
                for t in inputs
            ]
            with torch.no_grad():
                return self.model64(*as64)
        except Exception as exc:  # noqa: BLE001 - some models pin float32 internally
            if self.device.type == "cpu" and _allocation_failed(exc):
                # Out of memory (under the worker's cap, on a CPU): the problem is too large for the
                # limit, said as such (the parent names the cap), never a silently unchecked precision.
                raise
            self.model64_error = f"{type(exc).__name__}: {exc}"
            return None

    def dense_matmul_flops(self) -> dict[str, int]:
        """The nominal dense-matmul FLOPs of one forward on a timing input (torch's flop counter)."""
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        inputs = timing_inputs(self.module, 0, self.device)
        try:
            with torch.no_grad(), counter:
                self.model(*inputs)
        except Exception:  # noqa: BLE001 - an op the counter cannot follow: no FLOP floor, not a problem error
            return {"dense_matmul_flops": 0}
        counts = counter.get_flop_counts().get("Global", {})
        return {"dense_matmul_flops": int(sum(v for op, v in counts.items()
                                              if getattr(op, "__name__", "") in DENSE_MATMUL_OPS))}

    def start_timing(self, payload: dict[str, Any]) -> None:
        variants = {}
        if self.device.type == "cuda":
            variants["compile"] = lambda: torch.compile(self.model)
        self.timing = TimingSession(self.channel, self.model, self.module, self.device, timer=self.timer,
                                    variants=variants, measured=self.measured,
                                    extra_ready=self.dense_matmul_flops if self.device.type == "cuda" else None)
        self.timing.handle("time_start", payload)

    def expected_for(self, seed: int) -> None:
        inputs = timing_inputs(self.module, seed, self.device)
        with torch.no_grad():
            expected = self.model(*inputs)
        common.synchronize(self.device)
        self.channel.send("expected", {"expected": expected})

    def serve(self) -> None:
        while True:
            message = self.channel.recv()
            try:
                if message.kind == "setup":
                    self.setup(int(message.payload["weight_seed"]))
                elif message.kind == "trial":
                    payload = message.payload
                    self.trial(int(payload["seed"]), str(payload.get("family", "get_inputs")),
                               bool(payload.get("truth", False)))
                elif message.kind == "expected_for":
                    self.expected_for(int(message.payload["seed"]))
                elif message.kind == "time_start":
                    self.start_timing(message.payload)
                elif self.timing is not None and self.timing.handle(message.kind, message.payload):
                    pass
                elif message.kind == "exit":
                    return
                else:
                    raise ValueError(f"unknown request {message.kind!r}")
            except Exception as exc:  # the problem's own failure: report it, the parent raises
                self.channel.send("error", {"phase": message.kind,
                                           "message": common.format_error(exc, self.source, label="problem")})


def main() -> None:
    args = common.parse_worker_args("tritongym reference worker (internal)")
    channel = common.open_channel(args.fd)
    ReferenceWorker(channel, args.source, torch.device(args.device)).serve()
    channel.close()


if __name__ == "__main__":
    main()
    sys.exit(0)
