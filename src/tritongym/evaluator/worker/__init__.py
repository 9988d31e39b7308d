"""Room: code that runs inside a jailed worker process, beside candidate or problem code.

`candidate` is the candidate worker (it imports the model's module and serves forward calls) and
everything that records or polices beside it: the launch hook and launch log (`launches`,
`launchlog`), the op and host-read traces (`optrace`, `hostread`), the kernel-body checker
(`kernels`), the interpreter fixes (`interpreter_fixes`, `inductor_compat`), the autotune rotation
(`autotune`), the run-time policy (`audit_policy`), the timing and profiling loops (`timing`,
`profiling`). `reference` is the reference worker (problem code) and `startup` what every worker
does first.

Nothing here decides a verdict, and the parent process never imports this package (checked by
tests/unit/test_layout.py): while candidate Python shares an address space with these modules,
anything they record is a proposal that the parent and the clean room check, never evidence.
"""
