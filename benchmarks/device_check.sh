#!/bin/bash
# The GPU checks in one prepared command, for a lent GPU machine (docs/benchmarks.md "GPU").
#
#   bash benchmarks/device_check.sh            # on the GPU machine, from the repository root
#
# Installs nothing from the network: tritongym is put on the path with a .pth file (torch, triton,
# numpy and tqdm are the machine's). Where the machine has no bwrap, BWRAP_DIR names a folder with a
# bwrap binary and the libraries it needs (libselinux, libcap, libpcre2-8), copied from a Linux
# x86-64 machine; they are installed under /usr (run as root). On the machine that sends the tree
# (the device tool carries ignored folders named in `carry`):
#   echo /.dev/ >> .git/info/exclude; mkdir -p .dev/lib; cp "$(command -v bwrap)" .dev/
#   cp -L /lib/x86_64-linux-gnu/{libselinux.so.1,libcap.so.2,libpcre2-8.so.0} .dev/lib/
# then, there: BWRAP_DIR=.dev bash benchmarks/device_check.sh. Output: the GPU tests (one line
# each as they finish, a failure's report at once: benchmarks/pytest_live_failures.py), the GPU
# validation table with a fresh process per evaluation, then with the warm pool; the full logs
# are written to $OUT when it is set. First, which set-up step of a jailed fork server's child stops
# CUDA (benchmarks/gpu_fork_diagnosis.py); then the pool through fork servers that give each child
# a procfs of its own (the fix for that, FORK_S). DIAG_S / TESTS_S / VALID_S / FORK_S / POOL_S bound each part in
# seconds (0 skips it); KB_S bounds KernelBench at published sizes (KB_JSONL: the dataset's JSONL); ONLY and RUNS choose the validation's problems, WORKERS the pool's evaluations
# at once; TESTS picks tests (pytest -k), TEST_IDS names them instead, run in the order given.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
T0=$(date +%s)
log() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
TESTS_S=${TESTS_S:-300}; VALID_S=${VALID_S:-240}; POOL_S=${POOL_S:-120}; RUNS=${RUNS:-3}; WORKERS=${WORKERS:-1}
ONLY=${ONLY:-01_scaled_add,02_leaky_relu,07_softmax,10_matmul,12_linear_gelu}
if ! command -v bwrap >/dev/null && [ -n "${BWRAP_DIR:-}" ]; then
  cp "$BWRAP_DIR/bwrap" /usr/local/bin/bwrap
  for lib in "$BWRAP_DIR"/lib/*; do
    [ -e "/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ] || cp "$lib" /usr/lib/x86_64-linux-gnu/
  done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi: GPU lines will say unverified"
python3 -c "import tritongym" 2>/dev/null || \
  echo "$PWD/src" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/tritongym-checkout.pth"
python3 -c "import torch, triton, tritongym
from tritongym.evaluator.jail.sandbox import bwrap_problem
print('torch', torch.__version__, 'triton', triton.__version__,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device', tritongym.__file__)
print('bwrap:', bwrap_problem() or 'usable')"
if [ "${DIAG_S:-90}" -gt 0 ]; then
  log "jailed fork server children and CUDA, step by step (at most ${DIAG_S:-90} s)"
  timeout "${DIAG_S:-90}" python3 benchmarks/gpu_fork_diagnosis.py 2>&1 | tee "$OUT/gpu_fork_diagnosis.log"
fi
# A test still running after 110 s dumps every thread's stack (pytest's faulthandler_timeout): on
# 2026-11-28 two GPU tests ran past pytest-timeout's 120 s without being interrupted, and said nothing.
PER_TEST=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout 120")
if [ "$TESTS_S" -gt 0 ]; then
  log "GPU tests (at most ${TESTS_S} s)"
  # --full: tests/gpu is outside the default tier (tests/conftest.py), which would deselect it all.
  PYTHONPATH="$PWD/benchmarks" timeout "$TESTS_S" python3 -m pytest --full ${TEST_IDS:-tests/gpu} -v --tb=short -rfE \
    -p no:cacheprovider -p pytest_live_failures -o faulthandler_timeout=110 $PER_TEST ${TESTS:+-k "$TESTS"} 2>&1 | tee "$OUT/gpu_tests.log" \
    | grep -vE "^(platform|cachedir|rootdir|plugins|hypothesis|collect)" | cut -c1-400
fi
if [ "$VALID_S" -gt 0 ]; then
  log "GPU validation, a fresh process per evaluation (at most ${VALID_S} s): $ONLY x $RUNS"
  timeout "$VALID_S" python3 benchmarks/gpu_validation.py --runs "$RUNS" --only "$ONLY" 2>&1 | tee "$OUT/gpu_validation.log"
fi
if [ "${FORK_S:-120}" -gt 0 ]; then
  # The GPU fork server with a procfs per child (not yet run on a GPU): do its children pass the
  # GPU probe now, and how many evaluations per hour does the warm pool give with it?
  log "GPU validation through jailed fork servers, TRITONGYM_GPU_FORKSERVER=1 (at most ${FORK_S:-120} s)"
  TRITONGYM_GPU_FORKSERVER=1 timeout "${FORK_S:-120}" python3 benchmarks/gpu_validation.py --pool --workers 1 \
    --runs 2 --only "${FORK_ONLY:-01_scaled_add,07_softmax}" 2>&1 | tee "$OUT/gpu_validation_forkserver.log"
fi
if [ "${KB_S:-0}" -gt 0 ]; then
  # KernelBench at its published sizes: the dataset does not travel (it is never copied into the
  # repository), so KB_JSONL names a copy the device tool carried in an ignored folder. The honest
  # KernelBench solutions of examples/kernelbench at --size original, timed against eager and
  # torch.compile; then each problem's own reference forward behind a token kernel (no reward).
  log "KernelBench at published sizes (at most ${KB_S} s): examples/kernelbench against ${KB_JSONL:-none}"
  if [ -f "${KB_JSONL:-}" ]; then
    timeout "$KB_S" python3 -m tritongym.cli run --problems "$KB_JSONL" --solutions examples/kernelbench \
      --device cuda --size original --baseline both --workers 1 --json --out "$OUT/kb_original.jsonl" 2>&1 \
      | tee "$OUT/kb_original.log" | cut -c1-600
  else
    echo "KB_JSONL is not a file: KernelBench part skipped"
  fi
fi
if [ "$POOL_S" -gt 0 ]; then
  log "GPU validation, the warm pool, $WORKERS at once (at most ${POOL_S} s): $ONLY x $RUNS"
  timeout "$POOL_S" python3 benchmarks/gpu_validation.py --pool --workers "$WORKERS" --runs "$RUNS" --only "$ONLY" 2>&1 \
    | tee "$OUT/gpu_validation_pool.log"
fi
log done
