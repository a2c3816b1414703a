"""The model: what a scenario is, and the things it is made of.

Owns the scenario format (typed, frozen, validated once by `scenario.load_scenario`), latency
laws with their exact cdf/quantile, quotas and Retry-After, arrivals, named random streams and
the per-call draw bank, conditions (load slowdown, bad spells, difficulty, hardness), threshold
syntax, and the row types the engines write and the analysis reads (a call and its outcomes
among them). It is the floor: it imports nothing else of `sim`, and no simulation library.
"""
