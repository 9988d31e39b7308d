"""Room: how the parent confines a worker process.

`sandbox` starts workers under bubblewrap with resource limits, `seccomp` builds the system-call
filter a worker installs on itself before it loads any module it was given, `cgroups` caps memory
and processes. Imported by the parent to start workers and by workers to install the filter.
"""
