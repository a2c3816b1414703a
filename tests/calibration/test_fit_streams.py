"""Where the stalls sit and how often answers break (sim.calibration.streams), on logs drawn with
numpy at fixed seeds: first token LN(0.8 s, p99 4 s), speed LN(60, p99 110 tok/s), 3% of calls
stalled by LN(30 s, p99 80 s), placed before the first token, mid-stream or mixed. Each
estimate must lie within 4 of its own standard errors of the truth (a 4-sigma miss has
probability 6e-5 per value), and plain first tokens must claim no placement beyond the stated
false-positive rate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.calibration.calllog import conform
from sim.calibration.log_readers import read_call_logs
from sim.calibration.marginals import LogNormalFit, StallMixture, fit_group
from sim.calibration.report import fit_one, fitted_document, fitted_yaml, report_table
from sim.calibration.streams import MIN_CALLS, fit_streams, place_stalls
from sim.model.latency import LogNormal

TTFT = LogNormal.from_median_p99(0.8, 4.0)
SPEED = LogNormal.from_median_p99(60.0, 110.0)
EXTRA = LogNormal.from_median_p99(30.0, 80.0)
LENGTH = LogNormal.from_median_p99(300.0, 900.0)
STALL_P = 0.03


def stream_log(seed: int, n: int, before: float, p: float = STALL_P, broken: float = 0.0):
    """n calls; a stall with probability p, before the first token with probability `before`
    (else mid-stream); a share `broken` of answers broken after a uniform share of tokens."""
    rng = np.random.default_rng(seed)
    tokens = np.maximum(1, np.round(LENGTH.sample(rng, n)))
    ttft = TTFT.sample(rng, n)
    generation = tokens / SPEED.sample(rng, n)
    stalled = rng.random(n) < p
    extra = np.where(stalled, EXTRA.sample(rng, n), 0.0)
    first = rng.random(n) < before
    ttft = ttft + np.where(first, extra, 0.0)
    latency = ttft + generation + np.where(first, 0.0, extra)
    breaks = rng.random(n) < broken
    latency = np.where(breaks, ttft + rng.random(n) * generation, latency)
    return conform(
        pd.DataFrame(
            {
                "row": np.arange(1, n + 1),
                "start_s": np.cumsum(rng.exponential(0.1, n)),
                "latency_s": latency,
                "ttft_s": ttft,
                "provider": "p",
                "model": "m",
                "output_tokens": tokens,
                "status": np.where(breaks, "broken", "ok"),
            }
        )
    )


def _within(estimate: float, truth: float, se: float) -> None:
    assert se > 0
    assert abs(estimate - truth) <= 4 * se, (estimate, truth, se)


def test_stalls_before_the_first_token_are_placed_and_taken_out_of_the_first_token() -> None:
    calls = stream_log(1, 5000, before=1.0)
    g = fit_one(calls, "p", "m", "first_token", 0)
    block = fitted_document([g])["providers"]["p"]["serves"]["m"]
    assert block["stall"]["where"] == "before_first_token"
    _within(g.fit.stall.probability, STALL_P, g.fit.stall.se_probability)
    ttft = g.fit.ttft
    _within(ttft.median, TTFT.median, ttft.se_quantile(0.5))
    assert "placement: before first token" in fitted_yaml([g], ["log.csv"])
    assert report_table([g])["stall"][0].endswith(", before first token")


def test_mid_stream_stalls_write_nothing_new() -> None:
    """The default placement: the fitted block is the one fit_group gives, key for key."""
    calls = stream_log(2, 5000, before=0.0)
    fit = fit_group(calls, "p", "m")
    placed = fit_streams(fit, calls)
    assert placed.stream == {}
    assert placed.serving_block() == fit.serving_block()
    _within(fit.stall.probability, STALL_P, fit.stall.se_probability)


def test_a_mixture_is_told_and_its_share_recovered() -> None:
    calls = stream_log(3, 8000, before=0.4)
    placed = fit_streams(fit_group(calls, "p", "m"), calls)
    where = placed.stream["block"]["stall"]["where"]
    se = placed.stream["se"]["stall"]["where.before_first_token"]
    assert isinstance(where, dict)
    _within(where["before_first_token"], 0.4, se)
    _within(placed.stall.probability, STALL_P, placed.stall.se_probability)


@pytest.mark.slow
def test_plain_first_tokens_claim_no_placement_beyond_five_percent() -> None:
    """The BIC test's false-positive rate, as the docs state it: 20 plain logs of 1,000 first
    tokens (seeds 100..119), at most 1 claim (5%). Under the null the claims are
    Binomial(20, q): a test with q = 1% would exceed 1 with probability 0.017."""
    rng = np.random.default_rng(7)
    speed = LogNormalFit(0.0, 1.0, ((0.0, 0.0), (0.0, 0.0)), 0)
    none = StallMixture(speed, 0.0, 0.0, None, 0.0, 0.0, "no generation stall", False)
    claims = 0
    for seed in range(100, 120):
        times = TTFT.sample(np.random.default_rng(seed), 1000)
        claims += place_stalls(times, none).where != "mid_stream"
    assert claims <= 1
    small = TTFT.sample(rng, MIN_CALLS - 1) + np.where(rng.random(MIN_CALLS - 1) < 0.1, 30.0, 0)
    assert place_stalls(small, none).where == "mid_stream"  # too few calls to claim anything


def test_mid_stream_error_rate_from_broken_calls() -> None:
    calls = stream_log(4, 4000, before=0.0, broken=0.02)
    placed = fit_streams(fit_group(calls, "p", "m"), calls)
    rate = placed.stream["block"]["mid_stream_error_rate"]
    _within(rate, 0.02, placed.stream["se"]["mid_stream_error_rate"])
    assert "stall" not in placed.stream["block"]


@pytest.mark.parametrize("word", ["broken", "stream_error", "Incomplete"])
def test_readers_map_broken_stream_statuses(tmp_path: Path, word: str) -> None:
    path = tmp_path / "log.csv"
    path.write_text(f"latency_s,status\n1.5,ok\n2.0,{word}\n")
    calls, garbage = read_call_logs([path])
    assert list(calls["status"]) == ["ok", "broken"]
    assert garbage[str(path)].total == 0


def _span(span_id: str, error: bool, chunks: list[int], **attrs: float) -> dict:
    start = 1_000_000_000_000
    return {
        "traceId": "t",
        "spanId": span_id,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 3_000_000_000),
        "status": {"code": 2 if error else 1},
        "attributes": [
            {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
            *({"key": k, "value": {"doubleValue": v}} for k, v in attrs.items()),
        ],
        "events": [
            {"name": "llm.content.completion.chunk", "timeUnixNano": str(start + ms * 1_000_000)}
            for ms in chunks
        ],
    }


def test_otlp_chunk_events_give_the_first_token_and_broken_streams(tmp_path: Path) -> None:
    spans = [
        _span("a", False, [900, 450, 1200]),  # first chunk 0.45 s after the start
        _span("b", True, [700]),  # failed after a chunk: broken
        _span("c", True, []),  # failed before any chunk: an error
        _span("d", False, [900], **{"gen_ai.response.time_to_first_chunk": 0.3}),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    calls, _ = read_call_logs([path])
    assert list(calls["status"]) == ["ok", "broken", "error", "ok"]
    assert calls["ttft_s"].tolist()[:2] == [0.45, 0.7]
    assert np.isnan(calls["ttft_s"][2])
    assert calls["ttft_s"][3] == 0.3  # the attribute wins over the events
