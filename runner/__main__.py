"""Allow `python -m runner` as well as the `parallax` console script."""

from runner.cli import main

raise SystemExit(main())
