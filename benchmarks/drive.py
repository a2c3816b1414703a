"""How fast `tailsim drive` runs real client code, against the event engine on the same policy.

Run from the repository root: `python benchmarks/drive.py [--requests N]` (about 20 s). Prints,
per handler, the simulated requests per wall second of the drive and of the YAML policy that
describes it (scenarios/drive.yaml, 8 requests/s on 16 slots), and the speed-up over real time
(simulated seconds per wall second). Not part of the test run: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.drive_agreement import SCENARIO, router_handler, router_scenario  # noqa: E402
from experiments.drive_handlers import hand_hedge, openai_wait  # noqa: E402
from sim.api import drive, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    n = parser.parse_args(argv).requests
    print(f"load average before: {os.getloadavg()[0]:.2f}; {n} requests each")
    routed, tpm = router_scenario({})
    cases = [(SCENARIO, openai_wait, "openai-wait"), (SCENARIO, hand_hedge, "hedge"),
             (routed, router_handler(tpm), "router")]  # fmt: skip
    print(f"{'handler':16} {'drive req/s':>12} {'engine req/s':>13} {'sim s per wall s':>17}")
    for scenario, handler, policy in cases:
        began = time.perf_counter()
        result = drive(scenario, handler, requests=n)
        driven = time.perf_counter() - began
        began = time.perf_counter()
        run(scenario, requests=n, policies=[policy], engine="des")
        engine = time.perf_counter() - began
        span = float(result.requests["end_s"].max())
        print(f"{handler.__name__:16} {n / driven:12,.0f} {n / engine:13,.0f} "
              f"{span / driven:17,.0f}")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
