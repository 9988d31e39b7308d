"""Case: E3-inspect-signature-defaults
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: the harness keeps references it captured before the import in default arguments;
  inspect.signature (allowed: it reads the candidate's, torch's and Triton's functions) hands
  defaults out as Parameter.default
Strategy: imports the harness's evaluator modules (importable in the jail: the worker runs them)
  and collects every default argument of their functions through inspect.signature, to reach
  the references the harness captured; computes LeakyReLU in PyTorch, launching a decoy kernel.
  (Triton's JITFunction.run is no route: signature follows the hook's __wrapped__ to Triton's own
  function, whose defaults are Triton's.)
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {}
Device: cpu
"""

import importlib
import inspect

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _decoy_kernel(out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n_elements)


def _harness_defaults():
    captured = {}
    for name in ("worker.candidate", "worker.launches", "worker.optrace", "worker.hostread", "worker.audit_policy",
                 "common.channel"):
        module = importlib.import_module(f"tritongym.evaluator.{name}")  # loaded already in the worker
        for value in list(vars(module).values()):
            if not inspect.isfunction(value):
                continue
            try:
                for name, parameter in inspect.signature(value).parameters.items():
                    if parameter.default is not inspect.Parameter.empty:
                        captured[name] = parameter.default
            except (PermissionError, ValueError, TypeError):
                pass
    return captured


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope
        self.captured = _harness_defaults()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty_like(x)
        _decoy_kernel[(triton.cdiv(x.numel(), 4096),)](scratch, x.numel(), BLOCK=4096)
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
