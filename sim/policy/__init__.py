"""Policies: how one step is executed and what may be tried next.

Owns the policy kinds (wait, cut, race, hedge, downshift, adaptive, draft) with their planned
attempts, per-step resolution, storm controls (retry budget, hedge cap, breaker, AIMD, shed),
deadline rules and admission, and tool actions. It decides; the engine runs. It may import
`sim.model` only.
"""
