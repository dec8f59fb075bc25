"""The server's Prometheus metrics (`GET /metrics`, text exposition format).

  evokernel_requests_total{endpoint, status}      requests answered, by HTTP status
  evokernel_requests_cancelled_total              requests dropped before they finished
                                                  (client gone, shutdown deadline)
  evokernel_prompt_tokens_total                   prompt tokens of admitted requests
  evokernel_generation_tokens_total               tokens generated
  evokernel_queue_depth                           requests waiting for a KV slot
  evokernel_running_requests                      requests holding a KV slot
  evokernel_batch_capacity                        --max-batch
  evokernel_batch_occupancy_rows                  histogram: rows of each decode step
  evokernel_time_to_first_token_seconds           histogram: arrival -> first token
  evokernel_inter_token_latency_seconds           histogram: gap between a request's tokens
  evokernel_request_duration_seconds              histogram: arrival -> last token
  evokernel_engine_device_seconds_total{work}     device time of the engine's launches,
                                                  work "prefill" or "decode"
  evokernel_engine_launches_total{work}           prefill launches (one or several prompts of a
                                                  length bucket) and decode steps
  evokernel_engine_units_total{work, kind}        kind "used": prompt tokens / active rows;
                                                  "computed": the padded length / batch bucket
  evokernel_engine_host_seconds_total{phase}      the engine's host time per phase of its turns
                                                  (serve/accounts.py HOST_PHASES; "wait":
                                                  blocked on the device)
  evokernel_engine_turns_total                    the engine loop's turns
  evokernel_engine_busy_seconds_total             engine wall time with requests running or
                                                  waiting (its phases but "idle")
  evokernel_engine_cpu_seconds_total              the engine process's CPU time
  evokernel_gc_seconds_total{process}             time in Python's garbage collector, process
                                                  "engine" or "http" (serve/gc_clock.py)
  process_cpu_seconds_total, ...                  the HTTP process (prometheus_client's own)

The engine's series are its cumulative accounts as of its last message (serve/scheduler.py),
so a scrape after the last token of a load holds every launch of that load. `bench serve`
reads them around each concurrency to say where the device's time went.

A registry of its own per server (not the process-global one), so several servers in one
process (tests) never share counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from evokernel.engine.batching import batch_buckets
from evokernel.serve.accounts import HOST_PHASES
from evokernel.serve.gc_clock import GcClock

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
WORKS = ("prefill", "decode")


class EngineWork(Collector):
    """The engine's latest accounts as counter families, and both processes' GC time."""

    def __init__(self, http_gc: GcClock | None) -> None:
        self.work: dict[str, Any] = {}
        self.http_gc = http_gc

    def collect(self) -> Iterator[Metric]:
        clock = self.work.get("clock", {})
        device = CounterMetricFamily(
            "evokernel_engine_device_seconds", "Device time of launches", labels=["work"]
        )
        launches = CounterMetricFamily(
            "evokernel_engine_launches", "Prefills and decode steps", labels=["work"]
        )
        units = CounterMetricFamily(
            "evokernel_engine_units",
            "Prompt tokens / decode rows: used, and computed with padding",
            labels=["work", "kind"],
        )
        for work in WORKS:
            t = clock.get(work, {})
            device.add_metric([work], t.get("seconds", 0.0))
            launches.add_metric([work], t.get("launches", 0))
            units.add_metric([work, "used"], t.get("units", 0))
            units.add_metric([work, "computed"], t.get("padded", 0))
        yield device
        yield launches
        yield units
        host = self.work.get("host", {})
        phases = CounterMetricFamily(
            "evokernel_engine_host_seconds",
            "Engine host time per phase of a turn",
            labels=["phase"],
        )
        for phase in HOST_PHASES:
            phases.add_metric([phase], host.get(phase, 0.0))
        yield phases
        yield CounterMetricFamily(
            "evokernel_engine_turns", "Engine loop turns", value=host.get("turns", 0)
        )
        yield CounterMetricFamily(
            "evokernel_engine_busy_seconds",
            "Engine wall time with requests",
            value=sum(host.get(p, 0.0) for p in HOST_PHASES if p != "idle"),
        )
        yield CounterMetricFamily(
            "evokernel_engine_cpu_seconds",
            "Engine process CPU time",
            value=self.work.get("cpu_s", 0.0),
        )
        gc_time = CounterMetricFamily(
            "evokernel_gc_seconds", "Time in Python's garbage collector", labels=["process"]
        )
        gc_time.add_metric(["engine"], self.work.get("gc_s", 0.0))
        gc_time.add_metric(["http"], self.http_gc.seconds if self.http_gc else 0.0)
        yield gc_time


class Metrics:
    def __init__(self, max_batch: int, http_gc: GcClock | None = None) -> None:
        disable_created_metrics()  # no `*_created` series: they only add noise to scrapes
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "evokernel_requests", "Requests answered", ["endpoint", "status"], registry=r
        )
        self.cancelled = Counter(
            "evokernel_requests_cancelled", "Requests dropped before they finished", registry=r
        )
        self.prompt_tokens = Counter("evokernel_prompt_tokens", "Prompt tokens", registry=r)
        self.generation_tokens = Counter(
            "evokernel_generation_tokens", "Generated tokens", registry=r
        )
        self.queue_depth = Gauge("evokernel_queue_depth", "Requests waiting for a slot", registry=r)
        self.running = Gauge("evokernel_running_requests", "Requests holding a slot", registry=r)
        capacity = Gauge(
            "evokernel_batch_capacity", "Decode rows at most (--max-batch)", registry=r
        )
        capacity.set(max_batch)
        self.batch_rows = Histogram(
            "evokernel_batch_occupancy_rows",
            "Rows of each decode step",
            buckets=[float(b) for b in batch_buckets(max_batch)],
            registry=r,
        )
        self.ttft = Histogram(
            "evokernel_time_to_first_token_seconds",
            "Arrival to first token",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "evokernel_inter_token_latency_seconds",
            "Gap between consecutive tokens of a request",
            buckets=(0.0001, 0.0002, 0.0005, *LATENCY_BUCKETS),
            registry=r,
        )
        self.engine_work = EngineWork(http_gc)
        r.register(self.engine_work)
        ProcessCollector(registry=r)  # the HTTP process's CPU time and memory
        self.e2e = Histogram(
            "evokernel_request_duration_seconds",
            "Arrival to last token",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def engine_stats(self, rows: int, running: int, waiting: int, work: dict[str, Any]) -> None:
        self.engine_work.work = work
        if rows:
            self.batch_rows.observe(rows)
        self.running.set(running)
        self.queue_depth.set(waiting)

    def render(self) -> bytes:
        return generate_latest(self.registry)
