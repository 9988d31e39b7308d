"""Prometheus metrics of the service (``GET /metrics``), in a registry of its own.

Counters and histograms are updated as evaluations finish; the pool's and the store's state
(queue depth, in flight, restarts, sandbox mode) is read at scrape time by a collector.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from tritongym.evaluator.result import EvalResult
    from tritongym.service.config import ServiceConfig
    from tritongym.service.store import JobState, JobStore


class EvaluationService(Protocol):
    """What the metrics read of the service (`service.core.EvaluationService` has it; a Protocol,
    so that this module does not import the core that owns the metrics)."""

    pool: Any
    ready: bool
    store: JobStore
    config: ServiceConfig

#: Phase latencies span a millisecond (a static-gate refusal) to minutes (a big CPU-interpreted
#: kernel), so the buckets are logarithmic.
PHASE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300, 900)


class _PoolCollector(Collector):
    def __init__(self, service: EvaluationService) -> None:
        self.service = service

    def collect(self) -> Iterator[Any]:
        service = self.service
        pool = service.pool
        counts = service.store.count_by_state() if service.ready else {}
        queued = GaugeMetricFamily("tritongym_queue_depth", "Jobs accepted and not yet started (store + pool queue)")
        stats = pool.stats() if pool is not None else None
        store_queued = counts.get("queued", 0)
        queued.add_metric([], store_queued + (stats.queued if stats else 0))
        yield queued
        in_flight = GaugeMetricFamily("tritongym_jobs_in_flight", "Evaluations running now")
        in_flight.add_metric([], stats.busy if stats else 0)
        yield in_flight
        if stats is None:
            return
        slots = GaugeMetricFamily("tritongym_slots", "Evaluation slots of the pool (one evaluation each)")
        slots.add_metric([], stats.slots)
        yield slots
        busy_share = GaugeMetricFamily("tritongym_slot_utilisation", "Busy slots / slots")
        busy_share.add_metric([], stats.busy / stats.slots if stats.slots else 0.0)
        yield busy_share
        restarts = CounterMetricFamily("tritongym_worker_restarts", "Warm workers replaced after a crash")
        restarts.add_metric([], stats.restarts)
        yield restarts
        pool_jobs = CounterMetricFamily("tritongym_pool_jobs", "Jobs the pool ended, by outcome", labels=["outcome"])
        pool_jobs.add_metric(["completed"], stats.completed)
        pool_jobs.add_metric(["failed"], stats.failed)
        pool_jobs.add_metric(["cancelled"], stats.cancelled)
        yield pool_jobs
        stored = GaugeMetricFamily("tritongym_stored_jobs", "Jobs in the store, by state", labels=["state"])
        for state, n in sorted(counts.items()):
            stored.add_metric([state], n)
        yield stored
        info = InfoMetricFamily("tritongym_sandbox", "How candidates are isolated")
        info.add_metric([], {"mode": str(stats.sandbox), "launcher": str(stats.launcher),
                             "backend": service.config.backend})
        yield info


class ServiceMetrics:
    """The service's Prometheus registry and the instruments updated as jobs finish."""

    def __init__(self, service: EvaluationService) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.submitted = Counter("tritongym_jobs_submitted", "Jobs accepted (idempotent repeats excluded)",
                                 registry=self.registry)
        self.finished = Counter("tritongym_jobs_finished", "Jobs that reached a final state", ["state"],
                                registry=self.registry)
        self.verdicts = Counter("tritongym_verdicts", "Evaluation verdicts by status", ["status"],
                                registry=self.registry)
        self.violations = Counter("tritongym_violations", "Integrity violations found, by code", ["code"],
                                  registry=self.registry)
        self.timeouts = Counter("tritongym_timeouts", "Evaluations whose candidate hit its wall-clock budget",
                                registry=self.registry)
        self.phase_seconds = Histogram("tritongym_phase_seconds", "Wall-clock seconds per evaluation phase",
                                       ["phase"], buckets=PHASE_BUCKETS, registry=self.registry)
        self.evaluation_seconds = Histogram("tritongym_evaluation_seconds", "Wall-clock seconds per evaluation",
                                            buckets=PHASE_BUCKETS, registry=self.registry)
        self.pruned = Counter("tritongym_jobs_pruned", "Finished jobs deleted by retention", registry=self.registry)
        self.requests = Counter("tritongym_http_requests", "HTTP requests by route and status code",
                                ["route", "code"], registry=self.registry)
        self.registry.register(_PoolCollector(service))

    def observe(self, state: JobState, result: EvalResult | None) -> None:
        self.finished.labels(state=str(state)).inc()
        if result is None:
            return
        self.verdicts.labels(status=str(result.status)).inc()
        for violation in result.violations:
            self.violations.labels(code=str(violation.code)).inc()
        if str(result.status) == "timeout":
            self.timeouts.inc()
        for phase, seconds in result.phase_seconds.items():
            self.phase_seconds.labels(phase=phase).observe(max(0.0, float(seconds)))
        self.evaluation_seconds.observe(max(0.0, float(result.duration_s)))

    def render(self) -> bytes:
        return generate_latest(self.registry)
