"""Room: what both sides of the jail agree on, and nothing that decides or records.

`channel` is the wire (framing, message budgets, tensor encoding), `device` names and probes
devices, `families` defines the input families (the parent names them, the reference worker
builds them), `ops` is the vocabulary of ATen ops (canonical names, coverage rules),
`profiles` the per-kernel timing records a profile reply carries, `interpreter` the names the
CPU interpreter lacks or the fixes emulate. Workers and the parent both import these.
"""
