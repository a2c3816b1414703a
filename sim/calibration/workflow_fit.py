"""A workflow inferred from its traces: steps, order, retries, loops, branches and fan-outs.

Input: the checked span table (`sim.calibration.workflow_spans`): per trace a root (the run)
and the calls right under it, named by step. What is read, and how (docs/fitting.md, "Workflow
from traces"):
- steps from the span names; B is `after` A if in (nearly, `SEQUENCE_SHARE`) every trace holding
  both, B's first span starts once A's last has ended; else they overlap (parallel). An order
  seen in between is reported as ambiguous. `after` keeps the direct predecessors only.
- retries: a span of a step after a failed one of it is a retry; the policy is `kind: wait` with
  the most retries seen, and `timeout_s` where the failed spans' durations cluster at their top.
- loops: a step ending ok several times in sequence in a trace: `loop` with the empirical law of
  the per-trace counts, loops cut by a failure or the deadline counted as censored (N at least
  the iterations that ran, `censored_law`); fan-outs: copies starting together: `map`; a step
  absent from traces that reached it (its predecessors succeeded or were skipped): `when:
  {probability}`.
- model and sizes per step (median input and output tokens of its ok spans).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

#: B is after A when B started after A ended in at least this share of the traces with both.
SEQUENCE_SHARE = 0.95
#: Times closer than this (s) are the same instant (a step starting as its predecessor ends).
EPS_S = 1e-3
#: Failed spans within this share of the longest failed span are one cluster (a timeout).
TIMEOUT_BAND = 0.01


@dataclass
class StepSeen:
    """What the traces show of one step."""

    id: str
    model: str
    provider: str | None
    input_tokens: int
    output_tokens: int
    after: list[str] = field(default_factory=list)
    present: int = 0  # traces that hold it
    reached: int = 0  # traces whose predecessors succeeded (or were skipped)
    loop_counts: Counter[int] = field(default_factory=Counter)  # counts of finished loops
    loop_censored: Counter[int] = field(default_factory=Counter)  # cut loops: N >= this
    map_counts: Counter[int] = field(default_factory=Counter)
    retries: int = 0  # most retries of one call seen
    spans: int = 0

    def step(self) -> dict[str, Any]:
        """The step as a scenario's workflow step (the agreed loop / when / map keys)."""
        step: dict[str, Any] = {"id": self.id, "model": self.model}
        if self.provider is not None:
            step["provider"] = self.provider
        step["input_tokens"] = self.input_tokens
        step["output_tokens"] = self.output_tokens
        if self.after:
            step["after"] = list(self.after)
        if max(self.map_counts, default=1) > 1:
            step["map"] = {"count": empirical(self.map_counts), "join": "all"}
        elif max([*self.loop_counts, *self.loop_censored], default=1) > 1:
            step["loop"] = {"count": censored_law(self.loop_counts, self.loop_censored)}
        if 0 < self.present < self.reached:
            step["when"] = {"probability": round(self.present / self.reached, 4)}
        return step


@dataclass
class WorkflowSeen:
    """The workflow read from traces, with what the reading is sure of."""

    name: str
    traces: int
    ok: int
    hits: int
    steps: list[StepSeen]
    retries: int
    timeout_s: float | None
    deadline_s: float | None
    arrivals_s: np.ndarray
    ambiguous: list[str]
    notes: list[str]

    def policy(self) -> dict[str, Any]:
        """The client's policy as the traces show it."""
        policy: dict[str, Any] = {"kind": "wait", "retries": self.retries}
        if self.timeout_s is not None:
            policy["timeout_s"] = self.timeout_s
        return policy

    def report(self) -> dict[str, Any]:
        """The inference as data (the JSON report)."""
        steps = []
        for s in self.steps:
            share = s.present / s.reached if s.reached else float("nan")
            se = math.sqrt(share * (1 - share) / s.reached) if s.reached else float("nan")
            steps.append(
                {
                    "id": s.id,
                    "model": s.model,
                    "provider": s.provider,
                    "after": s.after,
                    "spans": s.spans,
                    "traces_present": s.present,
                    "traces_reached": s.reached,
                    "share_present": share,
                    "share_present_se": se,
                    "retries_seen": s.retries,
                    "loop_counts": dict(sorted(s.loop_counts.items())),
                    "loop_counts_censored": dict(sorted(s.loop_censored.items())),
                    "map_counts": dict(sorted(s.map_counts.items())),
                    "input_tokens": s.input_tokens,
                    "output_tokens": s.output_tokens,
                }
            )
        return {
            "name": self.name,
            "traces": self.traces,
            "traces_ok": self.ok,
            "hit_rate": self.hits / self.traces if self.traces else float("nan"),
            "deadline_s": self.deadline_s,
            "policy": self.policy(),
            "steps": steps,
            "ambiguous": self.ambiguous,
            "notes": self.notes,
        }

    def lines(self) -> list[str]:
        """The report as lines for people."""
        out = [
            f"{self.traces:,} traces read ({self.ok:,} ok); workflow {self.name!r}, "
            f"{len(self.steps)} steps; hit rate {self.hits / max(1, self.traces):.1%}",
            f"policy: {self.policy()} (retries: the most seen, a lower bound)",
            "deadline: "
            + (f"{self.deadline_s:g} s" if self.deadline_s is not None else "none seen"),
        ]
        for s in self.steps:
            share = s.present / s.reached if s.reached else float("nan")
            shape = ", ".join(k for k in ("loop", "map", "when") if k in s.step())
            out.append(
                f"  {s.id}: model {s.model}, after [{', '.join(s.after)}], {s.spans:,} spans, "
                f"present in {s.present:,} of {s.reached:,} traces that reached it "
                f"({share:.1%}), retries seen {s.retries}, tokens {s.input_tokens}/"
                f"{s.output_tokens}" + (f"; {shape}" if shape else "")
            )
        out += [f"  ambiguous: {line}" for line in self.ambiguous]
        out += [f"  note: {line}" for line in self.notes]
        return out


def empirical(counts: Counter[int]) -> dict[str, Any]:
    """A count law `{dist: empirical, values, weights}` from observed counts (weights: shares)."""
    values = sorted(counts)
    total = sum(counts.values())
    return {
        "dist": "empirical",
        "values": values,
        "weights": [round(counts[v] / total, 6) for v in values],
    }


def censored_law(done: Counter[int], cut: Counter[int]) -> dict[str, Any]:
    """The count law from finished loops (N = n) and loops cut by a failure or the deadline
    (N >= k: k iterations ran), by the discrete Kaplan-Meier estimator: the hazard at n is the
    finished count n over the loops known to reach n and not cut at n. Dropping the cut loops
    would bias the law short (a long loop is more likely cut); the cut is independent of the
    iterations still to come. Mass left past the last finished count goes to the longest cut
    one (a lower bound). Without cut loops: the shares of the finished counts, exactly."""
    if not cut:
        return empirical(done)
    values = sorted(set(done) | set(cut))
    law: Counter[float] = Counter()
    alive = 1.0
    for n in values:
        at_risk = sum(c for v, c in done.items() if v >= n) + sum(
            c for v, c in cut.items() if v > n
        )
        if at_risk and done.get(n):
            mass = alive * done[n] / at_risk
            law[n] += mass
            alive -= mass
    if alive > 1e-12:
        law[max(cut)] += alive
    total = sum(law.values())
    kept = sorted(v for v in law if law[v] > 0)
    return {
        "dist": "empirical",
        "values": [int(v) for v in kept],
        "weights": [round(law[v] / total, 6) for v in kept],
    }


def _mode(values: pd.Series) -> Any:
    known = values.dropna()
    return None if known.empty else known.astype(str).value_counts().index[0]


#: One step's spans in one trace, in start order: (starts, ends, ok flags).
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]


def _group(steps: pd.DataFrame) -> dict[tuple[str, str], Spans]:
    """The step spans by (trace, step), each in start order (`steps` is sorted by start)."""
    rows: dict[tuple[str, str], list[int]] = {}
    keys = zip(steps["trace_id"].astype(str), steps["name"].astype(str), strict=True)
    for i, key in enumerate(keys):
        rows.setdefault(key, []).append(i)
    start = steps["start_s"].to_numpy(float)
    end = steps["end_s"].to_numpy(float)
    ok = (steps["status"] == "ok").to_numpy(bool)
    return {k: (start[r], end[r], ok[r]) for k, r in rows.items()}


def _chains(spans: Spans) -> tuple[int, list[list[bool]]]:
    """(copies, chains): the spans starting with the first are copies (a fan-out); each later
    span continues the chain whose last span failed and ended before it (a retry), else the
    one whose last ended ok before it (the next iteration, a new chain). Chains: ok flags."""
    start, end, ok = spans
    copies = int(np.sum(start <= start[0] + EPS_S))
    chains: list[list[int]] = [[i] for i in range(copies)]
    for i in range(copies, len(start)):
        ready = [c for c in chains if end[c[-1]] <= start[i] + EPS_S]
        failed = [c for c in ready if not ok[c[-1]]]
        pool = failed or ready or chains
        chosen = max(pool, key=lambda c: end[c[-1]])
        if failed:
            chosen.append(i)
        else:
            chains.append([i])
    return copies, [[bool(ok[i]) for i in c] for c in chains]


def _timeout(failed_s: np.ndarray) -> float | None:
    """A client timeout: at least 3 failed spans whose durations cluster at the top."""
    if len(failed_s) < 3:
        return None
    top = failed_s[failed_s >= failed_s.max() * (1 - TIMEOUT_BAND)]
    return round(float(np.median(top)), 3) if len(top) >= 3 else None


def _deadline(roots: pd.DataFrame) -> float | None:
    """The deadline: at least 2 failed runs ending together at the longest run's duration."""
    duration = (roots["end_s"] - roots["start_s"]).to_numpy(float)
    failed = duration[(roots["status"] != "ok").to_numpy()]
    if len(failed) < 2 or failed.max() < duration.max() * (1 - 1e-4):
        return None
    top = failed[failed >= failed.max() * (1 - 1e-4)]
    return round(float(np.median(top)), 3) if len(top) >= 2 else None


def infer_workflow(
    roots: pd.DataFrame, steps: pd.DataFrame, deadline_s: float | None = None
) -> WorkflowSeen:
    """The workflow the traces show (see the module's docstring). `deadline_s` (given) wins
    over the one read from runs cut together at the longest duration."""
    traces = roots["trace_id"].tolist()
    origin = dict(zip(roots["trace_id"], roots["start_s"], strict=True))
    by = _group(steps)
    offset = (steps["start_s"] - steps["trace_id"].map(origin)).to_numpy(float)
    first_offset = (
        pd.Series(offset, index=steps.index).groupby([steps["trace_id"], steps["name"]]).min()
    )
    order = first_offset.groupby(level="name").median().sort_values(kind="stable")
    names = sorted(order.index, key=lambda n: (order[n], n))
    present = {n: {t for (t, m) in by if m == n} for n in names}
    first = {k: float(p[0].min()) for k, p in by.items()}
    last = {k: float(p[1].max()) for k, p in by.items()}
    precedes: dict[tuple[str, str], bool] = {}
    ambiguous: list[str] = []
    for a in names:
        for b in names:
            both = present[a] & present[b]
            if a == b or not both:
                continue
            share = sum(first[(t, b)] >= last[(t, a)] - EPS_S for t in both) / len(both)
            precedes[(a, b)] = share >= SEQUENCE_SHARE
            if 1 - SEQUENCE_SHARE < share < SEQUENCE_SHARE:
                ambiguous.append(
                    f"{b} after {a} in {share:.0%} of {len(both):,} traces (taken as parallel)"
                )
    seen: list[StepSeen] = []
    for b in names:
        preds = [a for a in names if precedes.get((a, b))]
        direct = [a for a in preds if not any(precedes.get((a, c)) for c in preds if c != a)]
        part = steps[steps["name"] == b]
        oks = part[part["status"] == "ok"]
        sized = oks if not oks.empty else part
        provider = _mode(part["provider"])
        seen.append(
            StepSeen(
                id=str(b),
                model=str(_mode(part["model"])),
                provider=None if provider in (None, "default") else str(provider),
                input_tokens=round(float(np.nanmedian(sized["input_tokens"]))) if
                sized["input_tokens"].notna().any() else 0,
                output_tokens=max(1, round(float(np.nanmedian(sized["output_tokens"]))))
                if sized["output_tokens"].notna().any() else 1,
                after=direct,
                spans=len(part),
            )
        )  # fmt: skip
    root_ok = dict(zip(roots["trace_id"], roots["status"] == "ok", strict=True))
    _tally(seen, traces, by, root_ok)
    # a call cut by the run's end (the deadline) is no client timeout: only the others count
    run_end = steps["trace_id"].map(dict(zip(roots["trace_id"], roots["end_s"], strict=True)))
    failed = steps.loc[(steps["status"] != "ok") & (steps["end_s"] < run_end - EPS_S)]
    timeout_s = _timeout((failed["end_s"] - failed["start_s"]).to_numpy(float))
    notes: list[str] = []
    deadline = deadline_s if deadline_s is not None else _deadline(roots)
    duration = (roots["end_s"] - roots["start_s"]).to_numpy(float)
    if deadline is None:
        notes.append(
            "no deadline seen (no failed runs cut together at the longest): set deadline_s"
        )
    ok = (roots["status"] == "ok").to_numpy()
    hits = ok & (duration <= (deadline if deadline is not None else np.inf) + EPS_S)
    if any("map" in s.step() for s in seen):
        notes.append("map: written with join all (copies cut at a first-K join look like failures)")
    name = _mode(roots["name"])
    starts = np.sort(roots["start_s"].to_numpy(float))
    return WorkflowSeen(
        name=str(name) if name is not None else "workflow",
        traces=len(traces),
        ok=int(ok.sum()),
        hits=int(hits.sum()),
        steps=seen,
        retries=max((s.retries for s in seen), default=0),
        timeout_s=timeout_s,
        deadline_s=deadline,
        arrivals_s=starts - starts[0],
        ambiguous=ambiguous,
        notes=notes,
    )


def _tally(
    seen: list[StepSeen],
    traces: list[str],
    by: dict[tuple[str, str], Spans],
    root_ok: dict[str, bool],
) -> None:
    """Per trace and step (in order): presence, whether it was reached, its copies, its loop
    count (where it finished) and the retries of each call."""
    dependants = {s.id: [d.id for d in seen if s.id in d.after] for s in seen}
    for trace in traces:
        done: dict[str, bool] = {}  # step -> succeeded, or was skipped (absent but reached)
        for s in seen:
            reached = all(done.get(a, False) for a in s.after)
            spans = by.get((trace, s.id))
            if spans is None:
                done[s.id] = reached
                s.reached += int(reached)
                continue
            s.present += 1
            s.reached += 1
            copies, chains = _chains(spans)
            s.retries = max([s.retries, *(len(c) - 1 for c in chains)])
            succeeded = all(c[-1] for c in chains)
            done[s.id] = succeeded
            s.map_counts[copies] += 1
            if copies > 1:
                continue
            finished = succeeded and (
                root_ok[trace] or any((trace, d) in by for d in dependants[s.id])
            )
            if finished:
                s.loop_counts[len(chains)] += 1
            else:  # cut by a failure or the deadline: N >= the iterations that ran
                s.loop_censored[len(chains)] += 1
