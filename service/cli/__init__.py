"""The `loomtune` command line: `main` (the `loomtune` script's entry point) is in `service.cli.main`."""

from service.cli.main import main

__all__ = ["main"]
