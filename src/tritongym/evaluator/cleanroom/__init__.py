"""Room: the clean-room worker, a jailed process that never runs candidate code.

`worker` replays the candidate worker's launch logs on the parent's own inputs: ATen ops through
`torch.ops.aten`, Triton kernels rebuilt by `kernels` from the hash-checked source text in a
namespace of Triton names only. What it measures is what the verdict believes
(docs/integrity.md, "The clean room"). It shares the worker startup and the interpreter fixes
with the other workers, never the verdict logic, and the parent never imports it.
"""
