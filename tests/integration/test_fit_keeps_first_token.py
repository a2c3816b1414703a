"""`tailsim fit` keeps first token + generation on a log that follows it, unless the log refutes
it (issue 25, item 11): 4,000 calls of first token + generation + stall, logged by `tailsim
synth`, were fitted as total time (the first-token time lost, `tokens_per_s: 1e9`) because the
total-time fit's misfit, driven by a p99 at the stall's edge that 4,000 calls pin down only
loosely, was below 2/3 of the other's. Now total time replaces it only where the log refutes it
(KS at 1%, or a fitted p50/p95/p99 outside the log's 99% order-statistic interval)."""

from __future__ import annotations

import pytest

from sim.calibration.report import fit_calls
from sim.calibration.synth import synth_calls
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario

#: The law the calls follow (one step, no queue, no quota, no difficulty): exactly tailsim's.
TTFT_MEDIAN = 0.3


def _scenario() -> object:
    serving = {
        "ttft_s": {"median": TTFT_MEDIAN, "p99": 1.5},
        "tokens_per_s": {"median": 150, "p99": 260},
        "stall": {"probability": 0.01, "extra_s": {"median": 10, "p99": 30}},
    }
    return scenario_from_dict(
        {
            "name": "first-token-law",
            "seed": 1,
            "deadline_s": 600,
            "requests": 4000,
            "arrivals": {"kind": "poisson", "rate_per_s": 1.0},
            "models": {"m": {"price_per_mtok": {"input": 1, "output": 1}}},
            "providers": {"p": {"concurrency": 10_000, "serves": {"m": serving}}},
            "workflow": {
                "steps": [{"id": "a", "model": "m", "input_tokens": 1000, "output_tokens": 150}]
            },
            "policies": {"wait": {"kind": "wait"}},
        },
        source="first-token-law",
    )


@pytest.mark.parametrize("seed", [1, 2])  # seed 1: total time under the old rule
def test_4000_calls_that_follow_first_token_keep_it(seed: int) -> None:
    log = synth_calls(compile_scenario(_scenario()), seed=seed)
    assert len(log) == 4000
    (group,), _ = fit_calls(log)
    fit = group.fit
    assert fit.mode == "first_token", fit.notes
    # the median's standard error by the delta method (the fit's own); 4 SE: a false alarm
    # about once in 16,000 seeds
    se = fit.ttft.se_quantile(0.5)
    assert abs(fit.ttft.median - TTFT_MEDIAN) <= 4 * se, (fit.ttft.median, se)
    assert se < 0.02 * TTFT_MEDIAN  # 4,000 calls pin it to better than 2%
    assert any(note.startswith("first token + generation kept: the log does not refute it")
               for note in fit.notes)  # fmt: skip


def test_the_reason_is_printed_under_the_fit_table(tmp_path) -> None:
    from click.testing import CliRunner  # noqa: PLC0415

    from sim.calibration.call_log import write_call_log  # noqa: PLC0415
    from sim.cli import main  # noqa: PLC0415

    trace = write_call_log(
        synth_calls(compile_scenario(_scenario()), seed=1, requests=600), tmp_path / "t.csv"
    )
    result = CliRunner().invoke(main, ["fit", str(trace), "--no-extras", "-q"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["fit", str(trace), "--no-extras", "--out",
                                       str(tmp_path / "fitted.yaml")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "p/m: first token + generation kept" in result.output
