"""A synthetic call log from a scenario: one policy's calls as a client would have logged them.

The round trip's other half of `tailsim fit`: the scenario runs on the simulator (bad spells,
difficulty, load slowdown and all, as the engine applies them) and its calls table becomes the
normalized call log (`sim.calibration.calllog`, docs/fitting.md), one row per call.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.analysis.capacity import ALL
from sim.calibration.calllog import CALL_LOG_COLUMNS, conform
from sim.plan import Plan
from sim.study.runner import chosen_policies, run

#: A call's outcome as the log's status. A call the client cut (cancelled at the deadline or as
#: a race's loser) is logged as `timeout` with its elapsed time, as a client logs its own
#: cancellations: leaving it out would drop exactly the longest calls (a right-censored latency).
STATUS = {
    "ok": "ok",
    "error": "error",
    "rate_limited": "rate_limited",
    "invalid": "invalid",
    "truncated": "invalid",
    "timeout": "timeout",
    "cancelled": "timeout",
    "broken": "broken",
}
#: The HTTP code a client would have logged for each status (none for a timeout).
HTTP = {"ok": 200, "invalid": 200, "error": 500, "rate_limited": 429}


def synth_calls(
    plan: Plan,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policy: str | None = None,
) -> pd.DataFrame:
    """One policy's calls (default: the scenario's first) as a normalized call log.

    latency_s is send to answer (queue included; a cut call's: send to the cut, status
    `timeout`), ttft_s send to first token (NaN if the call never got one, and for a cancelled
    call: the calls table does not keep it), request_id the run ("12", or "12.1" for a
    customer's first re-send).
    server_latency_s is the provider's own view (queue and service) when the calls table has a
    client overhead column (`overhead_s`), NaN otherwise."""
    name = chosen_policies(plan, [policy] if policy else None, "--policy")[0]
    calls = run(plan, requests=requests, seed=seed, policies=[name], records=ALL).calls
    return calls_to_log(calls)


def calls_to_log(calls: pd.DataFrame) -> pd.DataFrame:
    """A calls table (calls.parquet's columns) as the normalized call log, ordered by start."""
    kept = calls[calls["outcome"].isin(list(STATUS))]
    # a call cancelled before it was sent (no time held) is not a call a client would log
    sent = (kept["outcome"] != "cancelled") | (kept["end_s"] > kept["start_s"])
    kept = kept[sent].sort_values("start_s", kind="stable")
    start = kept["start_s"].to_numpy(float)
    latency = kept["end_s"].to_numpy(float) - start
    queue = np.nan_to_num(kept["queue_s"].to_numpy(float))
    ttft = queue + kept["ttft_s"].to_numpy(float)
    status = kept["outcome"].map(STATUS)
    request = kept["request_id"].astype("int64").astype(str)
    resend = kept["resend"].to_numpy(int) if "resend" in kept else np.zeros(len(kept), int)
    request = request.where(
        resend == 0, request + "." + pd.Series(resend, index=kept.index).astype(str)
    )
    if "overhead_s" in kept:
        server = latency - kept["overhead_s"].to_numpy(float)
    else:
        server = np.full(len(kept), np.nan)
    log = pd.DataFrame(
        {
            "row": np.arange(1, len(kept) + 1, dtype="int64"),
            "start_s": start,
            "latency_s": latency,
            "ttft_s": ttft,
            "provider": kept["provider"].astype("string").to_numpy(),
            "model": kept["model"].astype("string").to_numpy(),
            "input_tokens": kept["input_tokens"].to_numpy(float),
            "output_tokens": kept["output_tokens"].to_numpy(float),
            "status": status.astype("string").to_numpy(),
            "http_status": pd.array(status.map(HTTP).to_numpy(), dtype="Int64"),
            "request_id": request.astype("string").to_numpy(),
            "server_latency_s": server,
        }
    )
    return conform(log[list(CALL_LOG_COLUMNS)])
