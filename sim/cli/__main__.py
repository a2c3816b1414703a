"""`python -m sim.cli`: the same command line as the `tailsim` script."""

from sim.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
