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

A registry of its own per server (not the process-global one), so several servers in one
process (tests) never share counters.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from evokernel.engine.batching import batch_buckets

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, max_batch: int) -> None:
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
        self.e2e = Histogram(
            "evokernel_request_duration_seconds",
            "Arrival to last token",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def engine_stats(self, rows: int, running: int, waiting: int) -> None:
        if rows:
            self.batch_rows.observe(rows)
        self.running.set(running)
        self.queue_depth.set(waiting)

    def render(self) -> bytes:
        return generate_latest(self.registry)
