"""`tailsim fit`'s results: fits per group, the report tables and the `providers:` YAML block.

Per group (by default provider and model): n, fitted vs observed p50 / p95 / p99 of a successful
call's latency, the KS distance, p99/p50 per output-size bucket, and a fitted file holding
`models:` and `providers:` that a scenario takes with `include:` (or pasted), with each value's
standard error in its comments.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.stats import binom, ks_2samp, kstwo

from sim.calibration.extras import ExtraFit, nan_free
from sim.calibration.marginals import MarginalFit, fit_group
from sim.calibration.streams import fit_streams, placement_label, stream_block, stream_errors

#: Model draws used for a fitted distribution's percentiles and KS distance.
MODEL_DRAWS = 100_000
#: Output-size buckets (tokens, upper bounds inclusive) of the tail-ratio table.
SIZE_BUCKETS: tuple[tuple[int, int], ...] = ((1, 50), (51, 200), (201, 800), (801, 10**9))
MODES = ("auto", "first_token", "total_time")
#: A parametric fit whose KS test rejects it at this level is replaced by the calls themselves
#: (`dist: empirical`, the latencies written beside the fitted file).
EMPIRICAL_BELOW_P = 0.01
#: `auto` keeps first token + generation unless the log refutes it: its KS test rejects it at
#: `EMPIRICAL_BELOW_P`, or one of its fitted p50 / p95 / p99 lies outside the log percentile's
#: order-statistic interval at this level (so a p99 that sampling noise moves is no refutation).
REFUTE_LEVEL = 0.99
#: Where the log refutes both laws, total time replaces first token + generation only when its
#: misfit is below this share of the other's (first token kept when both fit alike:
#: `ttft_cutoff` needs it).
SWITCH = 2 / 3


@dataclass(frozen=True)
class GroupFit:
    """One group's fit, its calls (ok ones' latency) and draws of its fitted latency."""

    fit: MarginalFit
    observed: np.ndarray  # latency of the group's ok calls, s
    tokens: np.ndarray  # their output tokens (NaN where unknown)
    modelled: np.ndarray  # the fitted law's latencies for the same output tokens, s
    ks: float


def yaml_name(text: str) -> str:
    """A scenario name (letters, digits, `_ . -`) for a provider or model as the log spells it."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-.")
    return name or "unknown"


def _draws(fit: MarginalFit, tokens: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    usable = tokens[np.isfinite(tokens) & (tokens > 0)]
    return fit.sample(rng, MODEL_DRAWS, usable if len(usable) else None)


def order_interval(values: np.ndarray, q: float, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval of the q-quantile (q in (0, 1)) from sorted order statistics."""
    ordered = np.sort(values)
    n = len(ordered)
    lo = int(binom.ppf((1 - level) / 2, n, q))
    hi = int(binom.ppf((1 + level) / 2, n, q)) + 1
    return float(ordered[max(lo, 1) - 1]), float(ordered[min(hi, n) - 1])


def refutation(g: GroupFit) -> str:
    """Why the log refutes `g`'s law of total latency ('' where it does not): its KS test
    rejects it at `EMPIRICAL_BELOW_P`, or a fitted p50 / p95 / p99 lies outside the observed
    percentile's `REFUTE_LEVEL` order-statistic interval."""
    if len(g.observed) < 2:
        return ""
    p = ks_p_value(g)
    if p < EMPIRICAL_BELOW_P:
        return f"KS rejects it (D {g.ks:.3f}, p {p:.2g})"
    for q in (50, 95, 99):
        lo, hi = order_interval(g.observed, q / 100, REFUTE_LEVEL)
        fitted = float(np.percentile(g.modelled, q))
        if not lo <= fitted <= hi:
            return (
                f"its p{q} {fitted:.3g} s lies outside the log's {REFUTE_LEVEL:.0%} interval "
                f"[{lo:.3g}, {hi:.3g}] s"
            )
    return ""


def _misfit(observed: np.ndarray, draws: np.ndarray, ks: float) -> float:
    """How badly a fit reproduces total latency: KS distance plus the largest |log ratio| of
    fitted to observed p50, p95 and p99 (the body and the tail both count)."""
    if not len(observed) or not math.isfinite(ks):
        return 1e9
    qs = (50, 95, 99)
    ratios = np.log(np.percentile(draws, qs) / np.percentile(observed, qs))
    return ks + float(np.max(np.abs(ratios)))


def fit_one(group: pd.DataFrame, provider: str, model: str, mode: str, seed: int) -> GroupFit:
    """Fit one group; `auto` fits first token + generation where there is a first-token column
    and keeps it unless the log refutes it (`refutation`) and the total-time fit is not refuted
    (or, both refuted, reproduces total latency clearly better: `_misfit` below `SWITCH` times
    the other's); the group's notes say which was chosen and why."""
    ok = group[group["status"].fillna("ok") == "ok"]
    observed = ok["latency_s"].to_numpy(float)
    tokens = ok["output_tokens"].to_numpy(float)
    candidates = []
    if mode in ("auto", "first_token"):
        candidates.append(fit_streams(fit_group(group, provider, model), group))
    if mode == "total_time" or (mode == "auto" and candidates[0].mode == "first_token"):
        candidates.append(fit_streams(fit_group(group, provider, model, True), group))
    scored = []
    for fit in candidates:
        draws = _draws(fit, tokens, seed)
        ks = float(ks_2samp(observed, draws).statistic) if len(observed) else float("nan")
        scored.append(GroupFit(fit, observed, tokens, draws, ks))
    best = scored[0]
    if len(scored) == 2:
        best = _first_or_total(*scored)
    return _empirical_if_rejected(best, seed)


def _first_or_total(first: GroupFit, total: GroupFit) -> GroupFit:
    """`auto`'s choice between first token + generation and total time, said in the notes."""
    why = refutation(first)
    if not why:
        first.fit.notes.append(
            f"first token + generation kept: the log does not refute it (KS p "
            f"{ks_p_value(first):.2g}; fitted p50, p95, p99 inside the log's "
            f"{REFUTE_LEVEL:.0%} intervals)"
        )
        return first
    a = _misfit(first.observed, first.modelled, first.ks)
    b = _misfit(total.observed, total.modelled, total.ks)
    also = refutation(total)
    misfits = f"misfit {b:.3f} vs {a:.3f}: KS + largest |log ratio| of p50/p95/p99"
    if not also or b < SWITCH * a:
        total.fit.notes.append(
            f"total time fitted: first token + generation is refuted ({why}); total time "
            + ("is not" if not also else f"is too ({also}) but fits clearly better")
            + f" ({misfits}; a generation time the lognormal speed cannot carry, e.g. answers "
            "buffered then sent at once)"
        )
        return total
    first.fit.notes.append(
        f"first token + generation kept though refuted ({why}): total time is refuted too "
        f"({also}) and fits no clearly better ({misfits})"
    )
    return first


#: How a group's note on `auto`'s choice begins (`mode_lines` finds it by this).
MODE_NOTES = ("first token + generation kept", "total time fitted:")


def mode_lines(fits: list[GroupFit]) -> list[str]:
    """Per group fitted by `auto` with both laws tried: which was chosen and why, one line."""
    return [
        f"{g.fit.provider}/{g.fit.model}: {note}"
        for g in fits
        for note in g.fit.notes
        if note.startswith(MODE_NOTES)
    ]


def ks_p_value(g: GroupFit) -> float:
    """p-value of the one-sample KS test of the group's ok calls against its fitted law (the
    law's CDF read from its `MODEL_DRAWS` draws; the fit's own estimation is not corrected
    for, so the test is lenient: a rejection is a clear misfit)."""
    return float(kstwo.sf(g.ks, len(g.observed))) if len(g.observed) else 1.0


def _empirical_if_rejected(g: GroupFit, seed: int) -> GroupFit:
    """The group's calls replayed as they are (`dist: empirical`) where KS rejects the
    parametric fit at `EMPIRICAL_BELOW_P`; the fit itself otherwise."""
    p = ks_p_value(g)
    if p >= EMPIRICAL_BELOW_P or len(g.observed) < 2:
        return g
    f = g.fit
    note = (
        f"empirical: the {f.mode} fit fails KS at {EMPIRICAL_BELOW_P:.0%} (D {g.ks:.3f}, "
        f"p {p:.2g}, n {len(g.observed)}): the ok calls' latencies are replayed as they are "
        "(no tail beyond the largest call, output size ignored)"
    )
    stall = replace(f.stall, supported=False, probability=0.0, se_probability=0.0, extra=None)
    fit = replace(
        f, mode="empirical", stall=stall, samples=np.sort(g.observed), notes=[*f.notes, note]
    )
    draws = _draws(fit, g.tokens, seed)
    return GroupFit(fit, g.observed, g.tokens, draws, float(ks_2samp(g.observed, draws).statistic))


def fit_calls(
    calls: pd.DataFrame,
    by: tuple[str, ...] = ("provider", "model"),
    mode: str = "auto",
    min_calls: int = 20,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[GroupFit], list[str]]:
    """Fit every group of at least `min_calls` ok calls; the groups skipped, said why."""
    keyed = calls.assign(**{c: calls[c].fillna("unknown") for c in by})
    fits: list[GroupFit] = []
    skipped: list[str] = []
    for key, group in keyed.groupby(list(by), sort=True):
        labels = dict(zip(by, (str(k) for k in key), strict=True))
        provider = labels.get("provider", "all")
        model = labels.get("model", "all")
        extra = [labels[c] for c in by if c not in ("provider", "model")]
        if extra:
            provider = "-".join([provider, *extra])
        ok = int((group["status"].fillna("ok") == "ok").sum())
        if ok < min_calls:
            skipped.append(f"{provider}/{model}: {ok} ok calls < {min_calls}")
            continue
        if progress is not None:
            progress(f"{provider}/{model} ({len(group):,} calls)")
        fits.append(fit_one(group, provider, model, mode, seed))
    return fits, skipped


def _q(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def report_table(
    fits: list[GroupFit], extras: dict[tuple[str, str], str] | None = None
) -> pd.DataFrame:
    """One row per group: n, mode, observed vs fitted p50/p95/p99 (s), KS, stall, extras."""
    rows = []
    for g in fits:
        f = g.fit
        row: dict[str, Any] = {
            "provider": f.provider,
            "model": f.model,
            "n": f.n,
            "ok": len(g.observed),
            "fitted_from": f.mode,
        }
        for q in (50, 95, 99):
            row[f"p{q}_obs_s"] = _q(g.observed, q)
            row[f"p{q}_fit_s"] = _q(g.modelled, q)
        row["ks"] = g.ks
        row["stall"] = (
            f"{f.stall.probability:.3f} x {f.stall.extra.median:.3g} s{placement_label(f)}"
            if f.stall.supported and f.stall.extra is not None
            else "none"
        )
        row["error_rate"] = f.error_rate
        row["invalid_rate"] = f.invalid_rate
        row["extras"] = (extras or {}).get((f.provider, f.model), "")
        rows.append(row)
    return pd.DataFrame(rows)


def bucket_table(fits: list[GroupFit]) -> pd.DataFrame:
    """p50 and p99 (s) and p99/p50, observed and fitted, per group and output-size bucket
    (the article's Figure 4); buckets with fewer than 20 ok calls are left out."""
    rows = []
    for g in fits:
        tokens = g.tokens
        if not np.isfinite(tokens).any():
            tokens = np.ones(len(g.observed))
        for low, high in SIZE_BUCKETS:
            inside = (tokens >= low) & (tokens <= high)
            if inside.sum() < 20:
                continue
            rng = np.random.default_rng(0)
            model = g.fit.sample(rng, MODEL_DRAWS, tokens[inside])
            obs = g.observed[inside]
            label = f"{low}-{high}" if high < 10**9 else f">{low - 1}"
            p50o, p99o, p50f, p99f = _q(obs, 50), _q(obs, 99), _q(model, 50), _q(model, 99)
            rows.append(
                {
                    "provider": g.fit.provider,
                    "model": g.fit.model,
                    "output_tokens": label,
                    "n": int(inside.sum()),
                    "p50_obs_s": p50o,
                    "p99_obs_s": p99o,
                    "ratio_obs": p99o / p50o,
                    "p50_fit_s": p50f,
                    "p99_fit_s": p99f,
                    "ratio_fit": p99f / p50f,
                }
            )
    return pd.DataFrame(rows)


#: Extras a scenario takes today, by name: placed in the fitted file when supported.
PLACED_EXTRAS = ("episodes", "slowdown", "difficulty", "arrivals")


def extras_summary(fits: list[GroupFit], extras: list[ExtraFit]) -> dict[tuple[str, str], str]:
    """Per group: the supported extras of its provider and of the whole log, e.g.
    'episodes, arrivals (bursty)'; 'none' if none."""
    out = {}
    for g in fits:
        names = []
        for extra in extras:
            provider, _key = _where(extra)
            mine = provider is None or provider == g.fit.provider
            if extra.supported and mine:
                names.append(extra.name)
        out[(g.fit.provider, g.fit.model)] = ", ".join(dict.fromkeys(names)) or "none"
    return out


def place_extras(document: dict[str, Any], extras: list[ExtraFit]) -> list[str]:
    """Put each supported extra the scenario format takes into `document` (at its `where`);
    return one comment line per extra tested (the test stated, and where it went or why not)."""
    lines = []
    for extra in extras:
        name, key = _where(extra)
        placed = extra.supported and extra.name in PLACED_EXTRAS and nan_free(extra.block)
        if placed and name is not None:
            provider = document["providers"].get(yaml_name(name))
            placed = provider is not None
            if placed:
                provider[key] = _rounded(extra.block)
        elif placed:
            document[key] = _rounded(extra.block)
        verdict = "placed" if placed else ("not supported" if not extra.supported else "not placed")
        lines.append(f"{extra.where}: {verdict}; {extra.evidence}; SE {extra.standard_errors}")
    return lines


def _where(extra: ExtraFit) -> tuple[str | None, str]:
    """(provider or None, key) of an extra's `where`: `providers.api.x.ai.episodes` ->
    ('api.x.ai', 'episodes'); `arrivals` -> (None, 'arrivals')."""
    if extra.where.startswith("providers."):
        provider, _, key = extra.where[len("providers.") :].rpartition(".")
        return provider, key
    return None, extra.where


def refit_outside_spells(
    calls: pd.DataFrame,
    fits: list[GroupFit],
    extras: list[ExtraFit],
    by: tuple[str, ...],
    mode: str = "auto",
    seed: int = 0,
) -> list[GroupFit]:
    """Where bad spells are placed for a provider, refit its groups on the calls outside them
    (spell posterior < 0.5), so the spells' slowdown is not counted twice (once in the marginal
    law, once by `episodes`). `calls` must be the frame `fit_extras` saw (same index)."""
    slow = pd.Series(False, index=calls.index)
    spelled = set()
    for extra in extras:
        provider, _key = _where(extra)
        if extra.name == "episodes" and extra.supported and extra.detail is not None:
            slow.loc[extra.detail.index[extra.detail.to_numpy() >= 0.5]] = True
            spelled.add(provider)
            slow |= _cut_in_spells(calls, extra.detail, provider)
    if not spelled or tuple(by) != ("provider", "model"):
        return fits
    out = []
    for g in fits:
        if g.fit.provider not in spelled:
            out.append(g)
            continue
        mine = (calls["provider"] == g.fit.provider) & (calls["model"] == g.fit.model)
        quiet = calls[mine & ~slow]
        if (quiet["status"].fillna("ok") == "ok").sum() < 20:
            out.append(g)
            continue
        refit = fit_one(quiet, g.fit.provider, g.fit.model, mode, seed)
        refit.fit.notes.append(
            f"fitted on {len(quiet)} of {int(mine.sum())} calls outside bad spells (the "
            "provider's `episodes` block adds the spells back)"
        )
        out.append(refit)
    return out


def _cut_in_spells(calls: pd.DataFrame, posterior: pd.Series, provider: str | None) -> pd.Series:
    """The provider's cut calls (`timeout`: no residual, so no posterior of their own) that
    started in a spell: the posterior of its last call started at or before them >= 0.5."""
    out = pd.Series(False, index=calls.index)
    cut = calls[(calls["status"] == "timeout") & (calls["provider"] == provider)]
    if not len(cut) or not len(posterior):
        return out
    seen = pd.DataFrame(
        {
            "start_s": calls.loc[posterior.index, "start_s"].to_numpy(float),
            "post": posterior.to_numpy(float),
        }
    ).sort_values("start_s", kind="stable")
    mine = pd.DataFrame({"start_s": cut["start_s"].to_numpy(float), "at": np.arange(len(cut))})
    joined = pd.merge_asof(mine.sort_values("start_s"), seen, on="start_s", direction="backward")
    inside = np.zeros(len(cut), bool)
    inside[joined["at"].to_numpy()] = (joined["post"].fillna(0.0) >= 0.5).to_numpy()
    out.loc[cut.index[inside]] = True
    return out


def _rounded(block: dict[str, Any]) -> dict[str, Any]:
    return {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in block.items()}


def sample_file(g: GroupFit, stem: str = "fitted") -> str:
    """The name of the CSV an empirical group's latencies are written to, beside the fitted
    file `STEM.yaml`: `STEM.PROVIDER.MODEL.csv`."""
    return f"{stem}.{yaml_name(g.fit.provider)}.{yaml_name(g.fit.model)}.csv"


def sample_files(fits: list[GroupFit], stem: str = "fitted") -> dict[str, str]:
    """File name -> CSV text (column `latency_s`, s) of every empirical group."""
    return {
        sample_file(g, stem): pd.DataFrame({"latency_s": g.fit.samples}).to_csv(
            index=False, float_format="%.6g"
        )
        for g in fits
        if g.fit.mode == "empirical" and g.fit.samples is not None
    }


def fitted_document(fits: list[GroupFit], stem: str = "fitted") -> dict[str, Any]:
    """`{models: {...}, providers: {...}}`: every group's serving block under its provider
    (an empirical group's samples named as `sample_file` names them)."""
    models: dict[str, Any] = {}
    providers: dict[str, Any] = {}
    for g in fits:
        provider, model = yaml_name(g.fit.provider), yaml_name(g.fit.model)
        models.setdefault(model, {"price_per_mtok": {"input": 0.0, "output": 0.0}})
        serves = providers.setdefault(provider, {"serves": {}})["serves"]
        serves[model] = stream_block(g.fit, g.fit.serving_block(sample_file(g, stem)))
    return {"models": models, "providers": providers}


def fitted_yaml(
    fits: list[GroupFit],
    sources: list[str],
    extras: list[ExtraFit] | None = None,
    stem: str = "fitted",
) -> str:
    """The fitted file's text: a header (sources, method, standard errors, each group's output
    length for its steps) and the YAML of `fitted_document`."""
    lines = [
        "# Fitted by `tailsim fit` from: " + ", ".join(sources),
        "# Use it in a scenario with `include: THIS_FILE` (the scenario's own models and",
        "# providers win over these; set prices there), or paste the blocks.",
        "# Per provider/model: n calls, how it was fitted, standard errors (SE) of each value,",
        "# and the answer length to give its steps (`output_tokens`).",
    ]
    for g in fits:
        f = g.fit
        out = f.output_block()
        lines.append(
            f"#   {yaml_name(f.provider)}/{yaml_name(f.model)}: n={f.n} ({f.mode}), KS "
            f"{g.ks:.3f}; SE {_flat(stream_errors(f, f.standard_errors()))}; stall: "
            f"{f.stall.evidence}; steps: output_tokens: {out}"
        )
        lines += [f"#     note: {note}" for note in f.notes]
    document = fitted_document(fits, stem)
    if any(g.fit.mode == "empirical" for g in fits):
        lines.append(
            f"# Empirical groups replay their calls from {stem}.PROVIDER.MODEL.csv beside this "
            "file (written by `tailsim fit --out`)."
        )
    if extras:
        lines.append("# Extras (each placed only where the data support it, test stated):")
        lines += [f"#   {line}" for line in place_extras(document, extras)]
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=None)
    return "\n".join(lines) + "\n" + body


def _flat(ses: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for key, value in ses.items():
        if isinstance(value, dict):
            parts.append(_flat(value, f"{prefix}{key}."))
        else:
            parts.append(f"{prefix}{key} {value:.3g}")
    return ", ".join(parts)
