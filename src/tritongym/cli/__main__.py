"""``python -m tritongym.cli ...`` runs the ``tritongym`` command line."""

from tritongym.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
