"""Where the server's time went during one load of `bench serve`, from its `/metrics`.

    before = scrape(url)
    ... drive the load ...
    row["engine"] = accounts(before, scrape(url), wall_s)

The engine reports cumulative accounts (serve/metrics.py): the device time of its prefills and
decode steps, their launches, prompt tokens and decode rows (used, and computed with padding),
its host time per loop phase, its wall time with requests, its CPU and GC time; the HTTP
process reports its own CPU and GC time. The
difference of two scrapes, over the load's wall time, says what limited the load:

  decode_share, prefill_share   device time in decode steps / prefills, over the wall time;
  idle_share                    the rest: the device had nothing queued (host-bound turns,
                                requests in flight between client and engine, ramp-up/down)
  step_ms                       device time of a decode step (mean), rows_per_step its rows,
                                bucket_rows_per_step the batch bucket it ran at
  prefill_ms, prefill_tok_s     device time of a prefill (mean), prompt tokens per device
                                second, prefill_padding the computed/used token ratio
  engine_cpu, http_cpu          CPU seconds per wall second of each process (1.0 = a core)
  busy_share                    wall time the engine had requests running or waiting
  host_ms_per_turn              the engine's host time per turn outside its waits for the
                                device (and its polls and idle time); wait_share its time
                                blocked on the device over the wall time (small beside the
                                device shares: the host sets the pace); host_us_per_turn the
                                loop's time per phase and turn (not in the CSV)
  engine_gc, http_gc            each process's time in Python's garbage collector
  server_ttft_ms                mean time to first token as the server sees it (from the
                                request's arrival in its handler): against the clients' mean
                                (`ttft_ms_mean`), what the network and the clients add

A server that does not report these series (an older one) gives None for each.
"""

from __future__ import annotations

from typing import Any

HOST_SERIES = "evokernel_engine_host_seconds_total"  # one sample per phase label
NOT_TURN = ("poll", "idle", "wait")  # phases outside a turn's own host work

ENGINE_SERIES = {
    "decode_s": ("evokernel_engine_device_seconds_total", {"work": "decode"}),
    "prefill_s": ("evokernel_engine_device_seconds_total", {"work": "prefill"}),
    "steps": ("evokernel_engine_launches_total", {"work": "decode"}),
    "prefills": ("evokernel_engine_launches_total", {"work": "prefill"}),
    "rows": ("evokernel_engine_units_total", {"work": "decode", "kind": "used"}),
    "bucket_rows": ("evokernel_engine_units_total", {"work": "decode", "kind": "computed"}),
    "prompt_tokens": ("evokernel_engine_units_total", {"work": "prefill", "kind": "used"}),
    "padded_tokens": ("evokernel_engine_units_total", {"work": "prefill", "kind": "computed"}),
    "busy_s": ("evokernel_engine_busy_seconds_total", {}),
    "engine_cpu_s": ("evokernel_engine_cpu_seconds_total", {}),
    "http_cpu_s": ("process_cpu_seconds_total", {}),
    "turns": ("evokernel_engine_turns_total", {}),
    "server_ttft_s": ("evokernel_time_to_first_token_seconds_sum", {}),
    "server_ttfts": ("evokernel_time_to_first_token_seconds_count", {}),
    "engine_gc_s": ("evokernel_gc_seconds_total", {"process": "engine"}),
    "http_gc_s": ("evokernel_gc_seconds_total", {"process": "http"}),
}
LABELS = {  # each field's column heading (CSV: the field's own name, `engine_` before it)
    "decode_share": "decode",
    "prefill_share": "prefill",
    "idle_share": "idle",
    "step_ms": "step ms",
    "rows_per_step": "rows/step",
    "bucket_rows_per_step": "bucket rows",
    "prefill_ms": "prefill ms",
    "prefill_tok_s": "prefill tok/s",
    "prefill_padding": "padding",
    "busy_share": "engine busy",
    "engine_cpu": "engine CPU",
    "http_cpu": "HTTP CPU",
    "host_ms_per_turn": "host ms/turn",
    "wait_share": "host wait",
    "engine_gc": "engine GC",
    "http_gc": "HTTP GC",
    "server_ttft_ms": "TTFT ms in the server",
}
FIELDS = tuple(LABELS)
SHARES = {f for f in FIELDS if f.endswith(("_share", "_gc"))}  # fractions of the wall time


def parse(text: str) -> dict[str, float]:
    """The engine's and HTTP process's series of one `/metrics` text (missing ones left
    out)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == HOST_SERIES:  # the engine's loop phases, whichever it reports
                values[f"host_{sample.labels.get('phase')}_s"] = float(sample.value)
            for key, (name, labels) in ENGINE_SERIES.items():
                wanted = all(sample.labels.get(k) == v for k, v in labels.items())
                if sample.name == name and wanted:
                    values[key] = float(sample.value)
    return values


def scrape(url: str, timeout_s: float = 10.0) -> dict[str, float]:
    import httpx

    response = httpx.get(url + "/metrics", timeout=timeout_s)
    response.raise_for_status()
    return parse(response.text)


def accounts(before: dict[str, float], after: dict[str, float], wall_s: float) -> dict[str, Any]:
    """The load's figures (module doc) from two scrapes around it and its wall time."""
    if any(k not in before or k not in after for k in ENGINE_SERIES) or wall_s <= 0:
        return {**dict.fromkeys(FIELDS), "host_us_per_turn": None}
    d = {k: after[k] - before[k] for k in ENGINE_SERIES}
    phases = [k[5:-2] for k in after if k.startswith("host_") and k in before]
    host = {p: after[f"host_{p}_s"] - before[f"host_{p}_s"] for p in phases}

    def ratio(a: float, b: float) -> float | None:
        return a / b if b > 0 else None

    device = d["decode_s"] + d["prefill_s"]
    server_ttft = ratio(d["server_ttft_s"], d["server_ttfts"])
    step_s = ratio(d["decode_s"], d["steps"])
    prefill_s = ratio(d["prefill_s"], d["prefills"])
    return {
        "decode_share": d["decode_s"] / wall_s,
        "prefill_share": d["prefill_s"] / wall_s,
        "idle_share": max(0.0, 1.0 - device / wall_s),
        "step_ms": None if step_s is None else step_s * 1e3,
        "rows_per_step": ratio(d["rows"], d["steps"]),
        "bucket_rows_per_step": ratio(d["bucket_rows"], d["steps"]),
        "prefill_ms": None if prefill_s is None else prefill_s * 1e3,
        "prefill_tok_s": ratio(d["prompt_tokens"], d["prefill_s"]),
        "prefill_padding": ratio(d["padded_tokens"], d["prompt_tokens"]),
        "busy_share": d["busy_s"] / wall_s,
        "engine_cpu": d["engine_cpu_s"] / wall_s,
        "http_cpu": d["http_cpu_s"] / wall_s,
        "host_ms_per_turn": ratio(
            sum(v for p, v in host.items() if p not in NOT_TURN) * 1e3, d["turns"]
        ),
        "wait_share": host["wait"] / wall_s if "wait" in host else None,
        "engine_gc": d["engine_gc_s"] / wall_s,
        "http_gc": d["http_gc_s"] / wall_s,
        "server_ttft_ms": None if server_ttft is None else server_ttft * 1e3,
        "host_us_per_turn": {p: ratio(v * 1e6, d["turns"]) for p, v in host.items()},
    }
