"""The first token as the person sees it: per run, from arrival to the first token of the answer
of the step named by the scenario's `first_signal: {step, target_s}`.

In a chain the step that streams to the person is usually the last one, so the run's earliest
first token (`first_signal_s`, the first step's) says little about what they wait for. The
value is read off the tables alone (one function for both engines, so they agree whenever their
calls tables do): the step's delivered answer is its `ok` call that ended last (a validator's
re-ask, a retry after a cut or a race's winner: the answer kept), and its first token comes at
`start_s + queue_s + ttft_s`. A run whose step delivered no answer has NaN: a miss against the
target, and in the percentiles it counts at the run's `latency_s` (its deadline when it failed),
as `first_signal_s` does, so a policy that fails never looks quick.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.model.config import FirstSignalSpec
from sim.model.rows import OUTCOME_OK

#: The requests table's column, and the summary's metrics built from it.
USER_TTFT = "user_ttft_s"
PERCENTILES = (50, 90, 99)
USER_TTFT_METRICS = (*(f"user_ttft_p{q}_s" for q in PERCENTILES), "user_ttft_hit_rate")


def user_first_token(requests: pd.DataFrame, calls: pd.DataFrame, step: str) -> np.ndarray:
    """Per row of `requests` (one policy's runs), seconds from its arrival to the first token of
    `step`'s delivered answer; NaN where the step delivered none."""
    out = np.full(len(requests), np.nan)
    mine = calls[(calls["step"] == step).to_numpy(bool) & (calls["outcome"] == OUTCOME_OK)]
    if mine.empty or requests.empty:
        return out
    resend_of = requests["resend"].to_numpy(np.int64)
    width = int(max(resend_of.max(), mine["resend"].max())) + 1
    key = mine["request_id"].to_numpy(np.int64) * width + mine["resend"].to_numpy(np.int64)
    order = np.lexsort((mine["end_s"].to_numpy(float), key))  # stable: ties keep table order
    key = key[order]
    last = np.r_[key[1:] != key[:-1], True]
    kept, keys = order[last], key[last]
    queue = mine["queue_s"].to_numpy(float)[kept]
    token_at = (
        mine["start_s"].to_numpy(float)[kept]
        + np.where(np.isnan(queue), 0.0, queue)
        + mine["ttft_s"].to_numpy(float)[kept]
    )
    wanted = requests["request_id"].to_numpy(np.int64) * width + resend_of
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = keys[at] == wanted
    out[found] = token_at[at[found]] - requests["arrival_s"].to_numpy(float)[found]
    return out


def fill_user_first_token(
    requests: pd.DataFrame, calls: pd.DataFrame, step: str | None
) -> pd.DataFrame:
    """`requests` with its `user_ttft_s` column filled from `calls` (in place), when the
    scenario names a step; left NaN otherwise."""
    if step is not None:
        requests[USER_TTFT] = user_first_token(requests, calls, step)
    return requests


def user_ttft_row(
    user_ttft: np.ndarray, latency: np.ndarray, signal: FirstSignalSpec | None
) -> dict[str, float]:
    """The summary's `user_ttft_*` metrics from the runs' `user_ttft_s` and `latency_s`: a run
    with none counts at its latency in the percentiles and misses the target. NaN without a
    named step, runs, or (the hit rate) a target."""
    row = dict.fromkeys(USER_TTFT_METRICS, np.nan)
    if signal is None or not len(user_ttft):
        return row
    seen = np.where(np.isnan(user_ttft), latency, user_ttft)
    for q, value in zip(PERCENTILES, np.percentile(seen, PERCENTILES), strict=True):
        row[f"user_ttft_p{q}_s"] = float(value)
    if signal.target_s is not None:
        met = (~np.isnan(user_ttft)) & (user_ttft <= signal.target_s)
        row["user_ttft_hit_rate"] = float(met.mean())
    return row
