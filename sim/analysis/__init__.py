"""Analysis: formulas over rows and tables; it runs nothing.

Owns the metrics and their definitions (summary.csv), the breakdown (breakdown.csv), the
aggregation of replications with intervals, time series, the memory estimate, the closed forms
the simulator is held to, and the plain-language reading of a results table. It may import
`sim.policy` and `sim.model`.
"""
