"""`python -m experiments.real_client`: the real-client experiment (see run.py)."""

import sys

from experiments.real_client.run import main

sys.exit(main())
