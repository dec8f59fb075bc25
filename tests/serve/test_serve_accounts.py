"""`bench serve`'s accounts of where the time went (bench/serve_accounts.py): the engine's
series as the server renders them parse back, and two scrapes around a load give its shares,
step and prefill figures; a server without the series gives None rather than a wrong figure."""

from __future__ import annotations

import pytest

from evokernel.bench.serve_accounts import ENGINE_SERIES, FIELDS, NOT_TURN, accounts, parse
from evokernel.serve.accounts import HOST_PHASES
from evokernel.serve.metrics import Metrics


def work(decode_s, steps, rows, bucket, prefill_s, prefills, tokens, padded, cpu, turns=0):
    clock = {
        "decode": {"launches": steps, "seconds": decode_s, "units": rows, "padded": bucket},
        "prefill": {"launches": prefills, "seconds": prefill_s, "units": tokens, "padded": padded},
    }
    host = {phase: turns * 1e-4 for phase in HOST_PHASES} | {"turns": turns}  # 100 us each
    return {"clock": clock, "host": host, "cpu_s": cpu, "gc_s": cpu / 10}


def test_the_servers_rendered_series_parse_back():
    m = Metrics(8)
    m.engine_stats(3, 3, 0, work(0.5, 100, 700, 800, 0.2, 10, 3000, 4096, 1.5, turns=900))
    values = parse(m.render().decode())
    assert set(values) == set(ENGINE_SERIES) | {f"host_{p}_s" for p in HOST_PHASES}
    assert values["decode_s"] == 0.5 and values["steps"] == 100 and values["rows"] == 700
    assert values["bucket_rows"] == 800 and values["prefill_s"] == 0.2
    assert values["prompt_tokens"] == 3000 and values["padded_tokens"] == 4096
    busy = (len(HOST_PHASES) - 1) * 0.09  # every phase but "idle", 100 us x 900 turns each
    assert values["busy_s"] == pytest.approx(busy) and values["engine_cpu_s"] == 1.5
    assert values["engine_gc_s"] == 0.15
    assert values["http_cpu_s"] >= 0  # this process's own CPU time


def test_two_scrapes_give_the_loads_shares_and_means():
    m = Metrics(8)
    m.engine_stats(0, 0, 0, work(1.0, 10, 10, 10, 0.5, 2, 100, 128, 3.0, turns=10))
    before = parse(m.render().decode())
    m.engine_stats(0, 0, 0, work(2.6, 810, 6410, 6410, 0.9, 10, 2100, 2400, 4.5, turns=810))
    after = parse(m.render().decode())
    after["http_cpu_s"] = before["http_cpu_s"] + 0.4
    a = accounts(before, after, wall_s=2.0)
    assert set(a) == {*FIELDS, "host_us_per_turn"}
    assert a["decode_share"] == pytest.approx(0.8) and a["prefill_share"] == pytest.approx(0.2)
    assert a["idle_share"] == pytest.approx(0.0, abs=1e-12)
    assert a["step_ms"] == pytest.approx(2.0) and a["rows_per_step"] == pytest.approx(8.0)
    assert a["prefill_ms"] == pytest.approx(50.0) and a["prefill_tok_s"] == pytest.approx(5000)
    assert a["prefill_padding"] == pytest.approx(2272 / 2000)
    busy = (len(HOST_PHASES) - 1) * 800 * 1e-4  # every phase but "idle"
    assert a["busy_share"] == pytest.approx(busy / 2.0) and a["engine_cpu"] == pytest.approx(0.75)
    assert a["http_cpu"] == pytest.approx(0.2)
    turn = [p for p in HOST_PHASES if p not in NOT_TURN]  # not the polls, idle time or waits
    assert a["host_ms_per_turn"] == pytest.approx(0.1 * len(turn))
    assert a["engine_gc"] == pytest.approx(0.15 / 2.0) and a["http_gc"] >= 0
    assert a["server_ttft_ms"] is None  # no request arrived between the scrapes
    assert a["wait_share"] == pytest.approx(800 * 1e-4 / 2.0)
    assert a["host_us_per_turn"] == pytest.approx(dict.fromkeys(HOST_PHASES, 100.0))


def test_a_server_without_the_series_gives_none():
    none = {**dict.fromkeys(FIELDS), "host_us_per_turn": None}
    assert accounts({}, {}, 1.0) == none
    full = {k: 1.0 for k in ENGINE_SERIES}
    assert accounts(full, full, 0.0) == none
