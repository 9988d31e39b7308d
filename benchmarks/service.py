"""The service's overhead: the same batch through ``tritongym serve`` on loopback and in-process.

Two measurements, same workers, same machine, one run:

(1) throughput: a batch evaluated by `evaluate_many` on a warm in-process `LocalPool`, and the
    same batch through the service (`Client.evaluate_many`: submit, stream results), ``--rounds``
    times each in alternating order; ratio = median over rounds of service evaluations/s ÷
    in-process evaluations/s;
(2) added latency: one evaluation at a time, ``--latency-samples`` times, in-process
    (``pool.submit(...).result()``) and through the service (``Client.evaluate``, blocking
    ``POST /v1/evaluate``); added latency = median(service) − median(in-process).

The batch is ``--cheap`` candidates refused at the static gate (real verdicts in milliseconds:
the service's own cost dominates, the worst case for its overhead) plus ``--real`` honest
Triton solutions of the built-in suite (seconds each on a CPU). Printed as Markdown and one
JSON line.

With ``--client-problems`` each throughput round also sends the same batch with every problem
made a client's (its source plus one assignment, so it is no longer byte-for-byte a built-in):
the service then runs those references jailed (docs/service.md, "Security model"), and
``jailed_vs_trusted`` is the median over rounds of that side's evaluations/s ÷ the built-in side's.

Usage: ``python benchmarks/service.py [--workers 2] [--cheap 400] [--real 4] [--latency-samples 60] [--rounds 3]
[--client-problems]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_TRITON = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _batch(cheap: int, real: int):
    from tritongym.evaluator import EvalOptions
    from tritongym.execution import EvalRequest
    from tritongym.tasks import builtin_suite

    options = EvalOptions(device="cpu", num_trials=2)
    suite = builtin_suite()
    first = suite[0]
    requests = [EvalRequest(first, NO_TRITON + f"# candidate {i}\n", options) for i in range(cheap)]
    for problem in suite[:real]:
        requests.append(EvalRequest(problem, (ROOT / "examples" / "builtin" / f"{problem.name}.py").read_text(),
                                    options))
    return requests


def _as_client_problems(requests):
    """The same requests with each problem's source changed by one assignment: not a built-in any
    more, so the service treats it as client code (jailed reference)."""
    from dataclasses import replace

    from tritongym.tasks import Problem

    out, made = [], {}
    for request in requests:
        problem = request.problem
        if problem.content_hash not in made:
            made[problem.content_hash] = Problem.from_source(problem.source + "\n_SENT_BY_A_CLIENT = True\n",
                                                             name=problem.name, problem_id=problem.problem_id)
        out.append(replace(request, problem=made[problem.content_hash]))
    return out


def _start_server(workers: int, db: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "tritongym.cli", "serve", "--port", str(port), "--db", str(db),
                                "--workers", str(workers), "--device", "cpu", "--log-level", "warning"], cwd=ROOT)
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("the server did not become ready in 180 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cheap", type=int, default=400, help="static-gate candidates in the batch")
    parser.add_argument("--real", type=int, default=4, help="honest Triton solutions in the batch (built-in suite)")
    parser.add_argument("--latency-samples", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3, help="batch rounds per side (alternating order)")
    parser.add_argument("--client-problems", action="store_true",
                        help="also time the batch with client problems (jailed references) through the service")
    args = parser.parse_args()

    from tritongym.execution import LocalPool, evaluate_many
    from tritongym.service.client import Client

    requests = _batch(args.cheap, args.real)
    client_requests = _as_client_problems(requests) if args.client_problems else None
    latency_request = requests[0]
    with tempfile.TemporaryDirectory() as tmp:
        process, url = _start_server(args.workers, Path(tmp) / "bench.db")
        try:
            # Like the server (and `tritongym run`), this process only evaluates: its torch threads
            # are split between the slots.
            parent_threads = max(1, (os.cpu_count() or 1) // args.workers)
            with LocalPool(args.workers, parent_threads=parent_threads) as pool, Client(url) as client:
                # Warm both sides the same way: fork servers, reference workers, imports.
                evaluate_many(requests[:args.workers * 2] + requests[args.cheap:], pool=pool)
                list(client.evaluate_many(requests[:args.workers * 2] + requests[args.cheap:]))
                if client_requests is not None:
                    list(client.evaluate_many(client_requests[:args.workers * 2] + client_requests[args.cheap:]))

                # Rounds alternate which side goes first, so load drifting on a shared machine
                # does not favour one; the ratio is the median of the rounds' ratios.
                local_times, service_times, jailed_times = [], [], []
                for round_index in range(args.rounds):
                    sides = ["local", "service"] + (["jailed"] if client_requests is not None else [])
                    if round_index % 2:
                        sides.reverse()
                    for side in sides:
                        started = time.perf_counter()
                        if side == "local":
                            local = evaluate_many(requests, pool=pool)
                            local_times.append(time.perf_counter() - started)
                        elif side == "service":
                            remote = dict(client.evaluate_many(requests))
                            service_times.append(time.perf_counter() - started)
                        else:
                            jailed = dict(client.evaluate_many(client_requests))
                            jailed_times.append(time.perf_counter() - started)
                    verdicts = [str(r.status) for r in local]
                    assert verdicts == [str(remote[i].status) for i in range(len(requests))], \
                        "the service and the pool disagree on a verdict"
                    if client_requests is not None:
                        assert verdicts == [str(jailed[i].status) for i in range(len(requests))], \
                            "jailed and trusted references disagree on a verdict"
                local_s = statistics.median(local_times)
                service_s = statistics.median(service_times)
                ratio = statistics.median(lt / st for lt, st in zip(local_times, service_times, strict=True))

                local_lat, service_lat = [], []
                for _ in range(args.latency_samples):
                    started = time.perf_counter()
                    pool.submit(latency_request).result()
                    local_lat.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    client.evaluate(latency_request.problem, latency_request.solution, latency_request.options)
                    service_lat.append(time.perf_counter() - started)
        finally:
            process.terminate()
            process.wait(timeout=30)

    n = len(requests)
    row = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "command": "python benchmarks/service.py " + " ".join(sys.argv[1:]),
        "workers": args.workers, "batch": n, "cheap": args.cheap, "real": args.real,
        "in_process_eval_per_s": n / local_s, "service_eval_per_s": n / service_s,
        "throughput_ratio": ratio, "rounds": args.rounds,
        "in_process_latency_ms_median": 1000 * statistics.median(local_lat),
        "service_latency_ms_median": 1000 * statistics.median(service_lat),
        "added_latency_ms_median": 1000 * (statistics.median(service_lat) - statistics.median(local_lat)),
    }
    if jailed_times:
        row["service_jailed_eval_per_s"] = n / statistics.median(jailed_times)
        row["jailed_vs_trusted"] = statistics.median(
            st / jt for st, jt in zip(service_times, jailed_times, strict=True))
    print(f"| batch | workers | in-process eval/s | service eval/s | ratio | latency in-process (ms) | "
          f"latency service (ms) | added (ms) |\n|---|---|---|---|---|---|---|---|\n"
          f"| {n} ({args.cheap} static-gate + {args.real} Triton) | {args.workers} | "
          f"{row['in_process_eval_per_s']:.1f} | {row['service_eval_per_s']:.1f} | {row['throughput_ratio']:.2f} | "
          f"{row['in_process_latency_ms_median']:.1f} | {row['service_latency_ms_median']:.1f} | "
          f"{row['added_latency_ms_median']:.1f} |")
    if jailed_times:
        print(f"\nclient problems (jailed references) through the service: {row['service_jailed_eval_per_s']:.2f} "
              f"eval/s; jailed ÷ built-in (trusted), median over rounds: {row['jailed_vs_trusted']:.2f}")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
