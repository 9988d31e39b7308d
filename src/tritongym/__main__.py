"""``python -m tritongym ...`` runs the same command line as the ``tritongym`` command."""

from tritongym.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
