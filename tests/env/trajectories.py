"""Hand-built trajectories in the agent's schema, for metric and report tests (no model, no evaluator)."""

from __future__ import annotations

from typing import Any

from tritongym.env.history import progress_of


def result(status: str, speedup: float | None = None, compile_speedup: float | None = None) -> dict[str, Any]:
    return {"status": status, "correct": status == "ok", "reward": 0.5 if status == "ok" else 0.0,
            "speedup": speedup, "speedup_vs_compile": compile_speedup, "violations": []}


def turn(index: int, status: str, speedup: float | None = None, *, compile_speedup: float | None = None,
         prompt_tokens: int = 1000, completion_tokens: int = 500) -> dict[str, Any]:
    void = status == "void"
    return {"turn": index, "iteration": 0, "messages": [{"role": "user", "content": "task"}],
            "reply": "reply", "code": None if void else "code", "void": void, "status": status,
            "result": None if void else result(status, speedup, compile_speedup),
            "reward": 0.5 if status == "ok" else 0.0, "feedback": "fb",
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


def trajectory(problem: str, turns: list[dict[str, Any]], *, sample: int = 0, best: int | None = None,
               recheck: dict[str, Any] | None = None) -> dict[str, Any]:
    if best is None:
        scored = [t for t in turns if not t["void"]]
        # KernelEnv.best_turn's rule: reward, then how far the turn got, then the earliest.
        ranked = max(scored, key=lambda t: (t["reward"], progress_of(t["status"]), -t["turn"])) if scored else None
        best = ranked["turn"] if ranked else None
    return {"problem": problem, "problem_id": f"builtin/{problem}", "sample": sample, "turns": turns,
            "best_turn": best, "recheck": recheck, "provenance": {"model": "scripted", "device": "cuda"}}


def recheck_of(status: str, speedup: float | None, selection_speedup: float | None) -> dict[str, Any]:
    return {"turn": 0, "status": status, "correct": status == "ok", "speedup": speedup,
            "result": result(status, speedup), "selection": {"status": "ok", "speedup": selection_speedup}}


def gpu_run() -> list[dict[str, Any]]:
    """Four tasks, one sample each; final speedups 2.0 (re-checked down from 2.5), 1.1, incorrect, 0.5."""
    return [
        trajectory("a", [turn(0, "compile_error"), turn(1, "ok", 2.5, compile_speedup=1.3)], best=1,
                   recheck=recheck_of("ok", 2.0, 2.5)),
        trajectory("b", [turn(0, "ok", 1.1), turn(1, "incorrect")]),
        trajectory("c", [turn(0, "void"), turn(1, "integrity_violation")]),
        trajectory("d", [turn(0, "ok", 0.5), turn(1, "ok", 0.4)]),
    ]


def cpu_run() -> list[dict[str, Any]]:
    """Three tasks on a CPU: no speedups. Correct: a (turn 1), b (turn 0); c never."""
    return [
        trajectory("a", [turn(0, "compile_error"), turn(1, "ok")]),
        trajectory("b", [turn(0, "ok"), turn(1, "ok")]),
        trajectory("c", [turn(0, "void"), turn(1, "incorrect")]),
    ]
