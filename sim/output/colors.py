"""One colour per policy, the same in every figure (`policy_colors`).

Apart from `sim.output.plots` so that every module that draws (the run and sweep figures, the
storm and stress figures of `sim.output.storm_plots`) takes its colours from here without
importing another drawing module.
"""

from __future__ import annotations

from collections.abc import Iterable

import seaborn as sns

#: Colours of the usual policy names, fixed so a policy looks the same in every figure and run.
_FIXED = {"wait": 0, "cut": 1, "race": 2, "hedge": 3, "downshift": 4}


def policy_colors(policies: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """One colour per policy (colour-blind palette): the usual names keep fixed colours; other
    names take, in order, the strongest colours the usual names present leave free (so a
    scenario of custom names gets blue, orange, green... rather than the pale tail)."""
    palette = sns.color_palette("colorblind", 10)
    names = list(dict.fromkeys(str(p) for p in policies))
    taken = {_FIXED[name] for name in names if name in _FIXED}
    free = [i for i in range(len(palette)) if i not in taken]
    colors = {}
    for name in names:
        if name in _FIXED:
            colors[name] = palette[_FIXED[name]]
        else:
            colors[name] = palette[free.pop(0)] if free else palette[hash(name) % 10]
    return colors
