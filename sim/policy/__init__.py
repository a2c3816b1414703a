"""Policies: how one step is executed and what may be tried next.

Owns the policy kinds (wait, cut, race, hedge, downshift, adaptive, draft, router, per-step)
with their planned attempts (`plans`: what a policy and the engine exchange; `kinds/`: one
module per kind with its spec -> plan, its runs and capabilities, and the registry; `vector`:
the vectorized engine's handle; `build`: specs to runtime policies; flattening and checking
per-step entries is the format's, in `sim.model.config`), storm controls (retry
budget, hedge cap, breaker, AIMD, shed), deadline rules and admission, and tool actions. It
decides; the engine runs. It may import `sim.model` only.
"""
