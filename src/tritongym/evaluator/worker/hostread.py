"""How much input-derived data the candidate's own Python reads on the host (``host_compute``).

A Triton solution computes on the device, in its kernels. A candidate that computes the answer on
the host (numpy on ``x.numpy()``, plain Python over ``x.tolist()`` or ``.item()`` loops) and then
"writes" it with a copy kernel does no kernel work at all, and the op trace sees nothing: numpy and
Python arithmetic are not ATen ops. Every such route has one choke point: the input's *values*
must first reach host code. This trace counts them.

A `TorchFunctionMode` sees the Tensor methods that expose values to Python: ``numpy``,
``__array__`` (``np.asarray``), ``__dlpack__``, ``tolist``, ``item``, ``__float__``/``__int__``/
``__index__``/``__bool__``/``__complex__``, ``__repr__``/``__format__`` (printing), ``__reduce_ex__``
(pickling), ``untyped_storage``/``storage`` (byte access) and ``data_ptr`` (a raw address, which numpy
can read through an array interface). Each call made by the candidate's own code (see
`optrace.Attribution`: the interpreter's and the launcher's calls are Triton's) on a tensor that
holds input-derived data (`optrace.DataFlow`) adds the tensor's element count. On a GPU the same
route needs a device-to-host copy, which the op trace counts (`OpTrace.device_to_host_elements`).

The budget is `HOST_READ_BUDGET` elements per forward call: a few scalars (``n_valid =
mask.sum().item()`` to size a grid, as Liger's cross entropy does) pass; reading the inputs does
not, whether for the whole task or for part of it (the normalisation of a softmax).

It is also the op trace's second opinion: a torch call the candidate made that returned a tensor
in fresh storage while the dispatch trace saw no op at all means the dispatch trace was switched
off around it (``_disable_current_modes()`` and friends); `blinded` names such calls and the
worker reports them as tampering.

Runs in the candidate worker. Limits: a candidate that switches torch-function handling off
through torch's private ``torch._C`` switches reads unseen (the worker reports a non-empty or
disabled mode state after the call as tampering); see docs/integrity.md "Evidence".
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from tritongym.evaluator.worker.optrace import Attribution, DataFlow, OpTrace, storage_key

#: Input-derived elements the candidate's Python may read on the host per forward call.
HOST_READ_BUDGET = 64

#: Tensor methods that hand a tensor's values (or its raw address) to Python.
VALUE_READERS = frozenset({
    "numpy", "__array__", "__dlpack__", "tolist", "item", "__float__", "__int__", "__index__", "__bool__",
    "__complex__", "__repr__", "__format__", "__reduce_ex__", "untyped_storage", "storage", "_typed_storage",
    "data_ptr",
})


class HostReadTrace(TorchFunctionMode):
    """Counts input-derived elements whose values the candidate's code read on the host."""

    def __init__(self, attribution: Attribution, flow: DataFlow, op_trace: OpTrace | None = None) -> None:
        super().__init__()
        self.attribution = attribution
        self.flow = flow
        self.op_trace = op_trace
        self.elements = 0
        self.examples: list[str] = []
        self.blinded: list[str] = []
        self._readers = VALUE_READERS

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in self._readers and args and isinstance(args[0], torch.Tensor):
            tensor = args[0]
            if self.flow.is_input_derived(tensor) and self.attribution.who() == "candidate":
                count = tensor.numel()
                self.elements += count
                if len(self.examples) < 4:
                    self.examples.append(f"Tensor.{name}() of {count} input-derived element(s)")
            return func(*args, **kwargs)
        if self.op_trace is None:
            return func(*args, **kwargs)
        seen = self.op_trace.seen
        out = func(*args, **kwargs)
        if self.op_trace.seen == seen and isinstance(out, torch.Tensor) and out.numel() > 0 \
                and len(self.blinded) < 4:
            sources = {storage_key(t) for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)}
            if storage_key(out) not in sources and self.attribution.who() == "candidate":
                self.blinded.append(f"{name or func!r} returned a new tensor while the op trace saw no operation "
                                    "(the dispatch trace was switched off around it)")
        return out
