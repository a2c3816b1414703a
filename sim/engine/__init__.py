"""Engines: the simulation of one policy over a run's requests.

Owns the event engine (simpy: a request's bookkeeping, a step's run, a call's life), the
vectorized engine (numpy, for runs whose requests share nothing), when the vectorized engine
may run and the choice between them, and the streaming tally for summaries-only runs. It
receives a scenario and its resolved policies and returns rows; it never writes files. It may
import `sim.analysis`, `sim.policy` and `sim.model`.
"""
