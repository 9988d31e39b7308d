"""Benchmark the full-vocabulary paths of tritongym.rl: chunked vs naive (time and peak memory).

Paths (each is one realistic call on ``[batch, seq, vocab]`` logits):

* ``sum_pi_squared`` — OTB's Σπ² per position (``tritongym.rl.sum_pi_squared``) vs the naive
  ``softmax(logits.float()).pow(2).sum(-1)``.
* ``dvp`` — DVP log-probs of the sampled tokens *and their backward* (``dvp_log_probs``) vs a
  float32 masked ``log_softmax`` with autograd.
* ``trm`` — exact TRM-Max mask from full trainer and rollout logits (``trm_exact_mask``, per-token
  KL(π_roll ‖ π_train)) vs float32 ``log_softmax`` of both tensors.

What is measured, honestly:

* Time: median wall time of ``--repeats`` calls after one warm-up call (CUDA: synchronised), and
  the median process CPU time (user + system, all threads) of the same calls, which is less
  sensitive than wall time to other jobs sharing the machine.
* Memory, CPU: each (path, variant) runs in a *fresh subprocess*. The inputs are built in chunks
  (no float32 temporary of the full size), then ``ru_maxrss`` is read (baseline); after the
  warm-up and the timed calls it is read again (peak). The reported figure is peak − baseline: the
  high-water mark of *extra* resident memory the call needed, inputs excluded, the gradient
  buffer of the logits included (for ``dvp``). ``tracemalloc`` is not used: it does not see torch
  allocations.
* Memory, CUDA: ``torch.cuda.max_memory_allocated()`` minus the allocation after the inputs.
* Correctness: before timing, the main process compares both variants on a small slice of the
  same shape family and prints the max abs difference.

Usage (CPU shape of the docs):  python benchmarks/rl_heavy_paths.py --batch 8 --seq 2048 --vocab 32768
Full size on a GPU:             python benchmarks/rl_heavy_paths.py --device cuda --batch 8 --seq 8192 \
                                    --vocab 151936 --chunk 4096 --variants chunked,naive
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

from tritongym.rl import dvp_log_probs, sum_pi_squared, token_kl, trm_exact_mask

PATHS = ("sum_pi_squared", "dvp", "trm")
VARIANTS = ("chunked", "naive")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def build_logits(args: argparse.Namespace, seed: int, base: torch.Tensor | None = None) -> torch.Tensor:
    """[batch, seq, vocab] logits in ``args.dtype``, filled row-chunk by row-chunk (no big temporary)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (args.batch, args.seq, args.vocab)
    out = torch.empty(shape, dtype=DTYPES[args.dtype], device=args.device)
    flat = out.view(-1, args.vocab)
    base_flat = None if base is None else base.view(-1, args.vocab)
    step = max(1, 2**21 // args.vocab)  # ≤ 8 MiB float32 per fill block: keeps the RSS baseline honest
    for start in range(0, flat.shape[0], step):
        stop = min(start + step, flat.shape[0])
        block = torch.randn(stop - start, args.vocab, generator=gen) * 3.0
        if base_flat is not None:  # rollout logits = trainer logits + small engine noise
            block = base_flat[start:stop].float().cpu() + block / 3.0 * 0.02
        flat[start:stop] = block.to(flat.dtype).to(args.device)
    return out


def make_call(path: str, variant: str, args: argparse.Namespace):
    """Return (inputs description, zero-arg callable) for one (path, variant)."""
    logits = build_logits(args, seed=0)
    vchunk = args.vocab_chunk or None
    if path == "sum_pi_squared":
        if variant == "chunked":
            return lambda: sum_pi_squared(logits, chunk_size=args.chunk, vocab_chunk_size=vchunk)
        return lambda: logits.float().softmax(-1).pow(2).sum(-1)
    if path == "dvp":
        gen = torch.Generator(device="cpu").manual_seed(1)
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(args.device)
        leaf = logits.requires_grad_(True)
        log_alpha = math.log(args.alpha)

        def chunked() -> None:
            leaf.grad = None
            out = dvp_log_probs(leaf, tokens, args.alpha, chunk_size=args.chunk, vocab_chunk_size=vchunk)
            torch.where(out.in_safe, out.log_probs, 0.0).sum().backward()

        def naive() -> None:
            leaf.grad = None
            z = leaf.float()
            safe = z >= z.amax(-1, keepdim=True).detach() + log_alpha
            lp = torch.where(safe, z, -math.inf).log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
            in_safe = safe.gather(-1, tokens[..., None])[..., 0]
            torch.where(in_safe, lp, 0.0).sum().backward()

        return chunked if variant == "chunked" else naive
    if path == "trm":
        rollout = build_logits(args, seed=2, base=logits)
        mask = torch.ones(args.batch, args.seq, dtype=torch.bool, device=args.device)
        if variant == "chunked":
            return lambda: trm_exact_mask(
                logits, rollout, mask, delta=0.05, chunk_size=args.chunk, vocab_chunk_size=vchunk
            )

        def naive_trm() -> torch.Tensor:
            lp_roll = rollout.float().log_softmax(-1)
            lp = logits.float().log_softmax(-1)
            kl = (lp_roll.exp() * (lp_roll - lp)).sum(-1)
            return torch.where(mask, kl, 0.0).amax(-1) <= 0.05

        return naive_trm
    raise ValueError(f"path: expected one of {PATHS}, got {path!r}")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def current_rss_mb() -> float:
    """Resident set size now (Linux /proc/self/statm), MiB."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def worker(args: argparse.Namespace) -> dict[str, object]:
    """Run one (path, variant) in this process and return its measurements."""
    torch.set_num_threads(args.threads or torch.get_num_threads())
    call = make_call(args.path, args.variant, args)
    sync(args.device)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = maxrss_mb()  # high-water after the inputs (built in ≤ 8 MiB blocks, see build_logits)
        current = current_rss_mb()
    call()  # warm-up
    sync(args.device)
    times, cpu_times = [], []
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        call()
        sync(args.device)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else maxrss_mb() - base
    extra = {} if cuda else {"rss_inputs_mib": current, "rss_baseline_highwater_mib": base}
    return {
        **extra,
        "path": args.path,
        "variant": args.variant,
        "median_s": statistics.median(times),
        "times_s": times,
        "median_cpu_s": statistics.median(cpu_times),
        "peak_extra_mib": peak,
        "memory_kind": "cuda max_memory_allocated delta" if cuda else "ru_maxrss delta (fresh process)",
    }


def check_agreement(args: argparse.Namespace) -> dict[str, float]:
    """Max abs difference chunked vs naive on a small slice (batch 2, seq 16) of the same family."""
    small = argparse.Namespace(**{**vars(args), "batch": 2, "seq": 16, "chunk": 5})
    logits = build_logits(small, seed=0)
    vchunk = args.vocab_chunk or None
    out = {}
    ref = logits.float().softmax(-1).pow(2).sum(-1)
    chunked = sum_pi_squared(logits, chunk_size=5, vocab_chunk_size=vchunk)
    out["sum_pi_squared"] = (chunked - ref).abs().max().item()
    tokens = logits.float().argmax(-1)
    leaf_a = logits.clone().requires_grad_(True)
    res = dvp_log_probs(leaf_a, tokens, args.alpha, chunk_size=5, vocab_chunk_size=vchunk)
    res.log_probs.sum().backward()
    leaf_b = logits.clone().requires_grad_(True)
    z = leaf_b.float()
    safe = z >= z.amax(-1, keepdim=True).detach() + math.log(args.alpha)
    lp = torch.where(safe, z, -math.inf).log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
    lp.sum().backward()
    out["dvp_log_probs"] = (res.log_probs - lp).abs().max().item()
    out["dvp_grad"] = (leaf_a.grad.float() - leaf_b.grad.float()).abs().max().item()
    rollout = build_logits(small, seed=2, base=logits)
    lp_roll, lp_tr = rollout.float().log_softmax(-1), logits.float().log_softmax(-1)
    kl = (lp_roll.exp() * (lp_roll - lp_tr)).sum(-1)
    out["trm_kl"] = (token_kl(rollout, logits, chunk_size=5, vocab_chunk_size=vchunk) - kl).abs().max().item()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="sequences (default 8)")
    parser.add_argument("--seq", type=int, default=2048, help="tokens per sequence (default 2048)")
    parser.add_argument("--vocab", type=int, default=32768, help="vocabulary size (default 32768)")
    parser.add_argument("--chunk", type=int, default=1024, help="positions per row chunk (default 1024)")
    parser.add_argument("--vocab-chunk", type=int, default=0, help="vocabulary slice, 0 = whole (default 0)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i] (default cpu)")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES), help="logits dtype")
    parser.add_argument("--alpha", type=float, default=1e-3, help="DVP min-p threshold (default 1e-3)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per variant (default 3)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads, 0 = torch default")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma list of {PATHS}")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {VARIANTS}")
    parser.add_argument("--json-out", default="", help="also write the results as JSON to this file")
    parser.add_argument("--worker", nargs=2, metavar=("PATH", "VARIANT"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        args.path, args.variant = args.worker
        print(json.dumps(worker(args)))
        return 0
    paths = [p for p in args.paths.split(",") if p]
    variants = [v for v in args.variants.split(",") if v]
    for name, allowed in ((paths, PATHS), (variants, VARIANTS)):
        bad = [x for x in name if x not in allowed]
        if bad:
            raise SystemExit(f"expected values in {allowed}, got {bad}")
    print(
        f"# torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} cpus, device {args.device}, dtype {args.dtype}"
    )
    print(
        f"# shape {args.batch} x {args.seq} x {args.vocab}, chunk {args.chunk}, "
        f"vocab chunk {args.vocab_chunk or 'whole'}, repeats {args.repeats}"
    )
    print("# agreement chunked vs naive (max abs diff, small slice):", json.dumps(check_agreement(args)))
    results = []
    forwarded = [a for a in (argv if argv is not None else sys.argv[1:])]
    for path in paths:
        for variant in variants:
            cmd = [sys.executable, os.path.abspath(__file__), *forwarded, "--worker", path, variant]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
                row = {"path": path, "variant": variant, "error": f"exit {proc.returncode}: {tail[0]}"}
            else:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(row)
            print(json.dumps(row), flush=True)
    print("\n| path | variant | median wall (s) | median CPU (s) | peak extra memory (MiB) |")
    print("|---|---|---:|---:|---:|")
    for row in results:
        if "error" in row:
            print(f"| {row['path']} | {row['variant']} | failed: {row['error']} | | |")
        else:
            cells = f"{row['median_s']:.2f} | {row['median_cpu_s']:.2f} | {row['peak_extra_mib']:.0f}"
            print(f"| {row['path']} | {row['variant']} | {cells} |")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"args": vars(args), "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
