"""Studies: what a user asks of the simulator, built from engine runs.

Owns the run (pilot, then every policy on common random numbers) and its `RunResult`, running
a run's policies or a sweep's points on executors (inline, processes, dask), sweeps and their
point types, the storm-margin search (stress), the tuner and the theory checks (validate).
It returns tables and results; it never writes result folders or figures. It may import every
layer below it: `sim.engine`, `sim.analysis`, `sim.policy`, `sim.model`.
"""
