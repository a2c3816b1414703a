"""Output: results on disk and for people.

Owns run folders and sweep folders (written all or nothing, locked, resumable), the figures
(seaborn, drawn from tables only), the HTML report and `explain`. It may import every layer
below it; only `sim.api` and `sim.cli` sit above it.
"""
