"""Engines: the simulation of one policy over a run's requests.

Owns the event engine (on simpy, whose insides only `kernel` touches; then the providers'
shared state, a call's life, a step's run and a request's bookkeeping), the vectorized engine
(numpy, for runs whose requests share nothing), when the vectorized engine may run and the
choice between them, and the streaming tally for summaries-only runs. It receives a compiled
plan and its policies and returns rows; it never writes files. It may import `sim.analysis`,
`sim.plan`, `sim.policy` and `sim.model`.
"""
