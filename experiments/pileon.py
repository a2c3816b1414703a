"""Experiment: the pile-on, racing into a saturated quota.

The article: "the tail is worst when the system is busy, and busy is exactly when your
tokens-per-minute budget has the least room left ... do it blindly and you get a pile-on: a
latency problem becomes a rate-limit problem"; the fix is to "send the hedge somewhere with its
own budget" and keep hedges rare. A four-step chain on two providers with their own quotas; the
primary provider's TPM is swept from roomy to tight at a fixed arrival rate. Racing two attempts
on the primary provider doubles its token use and meets the 429s first; a hedge past p90 sent to
the second provider's own quota keeps its hit rate.

Run: `python experiments/pileon.py` (about 1 min); writes results/experiments/pileon/.
"""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
from _common import DIRECT_BIG, beside, chain, out_dir, save, theme

import sim
from sim.output.colors import policy_colors

TPM = [4_000_000, 2_000_000, 1_200_000, 900_000]
POLICIES = {
    "wait": {"kind": "wait", "retries": 1},
    "race": {"kind": "race", "attempts": 2, "providers": ["primary", "primary"]},
    "hedge": {"kind": "hedge", "after": "p90", "providers": ["second"]},
}


def scenario() -> sim.Scenario:
    providers = {
        "primary": {"tpm": TPM[0], "serves": {"m": DIRECT_BIG}},
        "second": {"tpm": 2_000_000, "serves": {"m": DIRECT_BIG}},
    }
    return chain(
        "pileon",
        4,
        DIRECT_BIG,
        POLICIES,
        deadline_s=60,
        rate_per_s=1.5,
        providers=providers,
        extra={"sweep": {"grid": {"providers.primary.tpm": TPM}, "replications": 1}},
    )


def main() -> None:
    folder = out_dir("pileon")
    result = sim.sweep(scenario(), requests=1500, executor="processes", workers=2)
    table = result.aggregate
    table.to_csv(folder / "summary.csv", index=False)
    cols = [
        "providers.primary.tpm",
        "policy",
        "hit_rate",
        "hit_rate_lo",
        "hit_rate_hi",
        "rate_limited_per_request",
        "cost_per_success_usd",
    ]
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    tight = table[table["providers.primary.tpm"] == TPM[-1]].set_index("policy")
    roomy = table[table["providers.primary.tpm"] == TPM[0]].set_index("policy")
    print()
    print(
        beside(
            [
                (
                    "racing into a tight quota",
                    "piles on: a latency problem becomes a rate-limit one",
                    f"race 429s/request {roomy.loc['race', 'rate_limited_per_request']:.2f} -> "
                    f"{tight.loc['race', 'rate_limited_per_request']:.2f}, hit rate "
                    f"{roomy.loc['race', 'hit_rate']:.1%} -> {tight.loc['race', 'hit_rate']:.1%}",
                ),
                (
                    "hedge to its own budget",
                    "escapes the congestion",
                    f"hedge hit rate {roomy.loc['hedge', 'hit_rate']:.1%} -> "
                    f"{tight.loc['hedge', 'hit_rate']:.1%}, "
                    f"429s/request {tight.loc['hedge', 'rate_limited_per_request']:.2f}",
                ),
                (
                    "waiting, for reference",
                    "",
                    f"{roomy.loc['wait', 'hit_rate']:.1%} -> {tight.loc['wait', 'hit_rate']:.1%}",
                ),
            ],
            "Pile-on: the article beside tailsim",
        )
    )
    theme()
    colors = policy_colors(POLICIES)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    for policy, part in table.groupby("policy", sort=False):
        x = part["providers.primary.tpm"] / 1e6
        left.plot(x, part["hit_rate"], "o-", color=colors[policy], label=policy)
        left.fill_between(
            x, part["hit_rate_lo"], part["hit_rate_hi"], color=colors[policy], alpha=0.15
        )
        right.plot(x, part["rate_limited_per_request"], "o-", color=colors[policy], label=policy)
    for ax in (left, right):
        ax.invert_xaxis()
        ax.set_xlabel("primary provider's quota (million tokens per minute; tighter ->)")
    left.set(ylabel="deadline hit rate (95% CI)", title="Hit rate as the quota tightens")
    left.yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    right.set(ylabel="429s per request", title="Racing on one quota piles on 429s")
    left.legend()
    save(fig, folder / "pileon.png")


if __name__ == "__main__":
    main()
