"""Plumbing shared by the parent's phases: the candidate's budget, the worker handle, early ends.

`Budget` charges only the time the parent waits on the candidate; `WorkerHandle` pairs a
worker process with its channel; `CandidateFailed` carries a verdict that ends the evaluation
early (an error the candidate reported, a crash, a timeout).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from tritongym.evaluator.common.channel import DEFAULT_MAX_MESSAGE_BYTES, Channel, ChannelClosed, Message
from tritongym.evaluator.jail.sandbox import WorkerProcess
from tritongym.evaluator.result import Status


class CandidateFailed(Exception):
    """Internal: the candidate ended the evaluation early (error, crash, timeout)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Budget:
    """Wall-clock budget of the candidate: only time spent waiting on the candidate counts."""

    seconds: float
    spent: float = 0.0

    def remaining(self) -> float:
        return self.seconds - self.spent


@dataclass
class WorkerHandle:
    """The parent's handle on one worker: its process, its channel, the budget it is charged to."""

    process: WorkerProcess
    channel: Channel
    budget: Budget

    def allow_reply_bytes(self, expected_outputs: list[torch.Tensor]) -> None:
        """Bound the next replies by what an honest candidate sends: the outputs, twice, plus slack.

        A hostile worker cannot make the parent buffer more than this (a larger claim is a
        protocol error, i.e. a crash verdict).
        """
        output_bytes = sum(t.numel() * t.element_size() for t in expected_outputs)
        self.channel.max_message_bytes = max(DEFAULT_MAX_MESSAGE_BYTES, 2 * output_bytes + DEFAULT_MAX_MESSAGE_BYTES)

    def request(self, kind: str, payload: Any = None) -> Message:
        """Send one request and wait for the reply within the worker's budget."""
        try:
            self.channel.send(kind, payload)
        except OSError as exc:
            raise ChannelClosed(f"could not send {kind!r}: {exc}") from exc
        return self.receive()

    def receive(self) -> Message:
        """Wait for the next message within the worker's budget (the time waited is charged)."""
        start = time.monotonic()
        try:
            return self.channel.recv(timeout=max(self.budget.remaining(), 0.001))
        finally:
            self.budget.spent += time.monotonic() - start
