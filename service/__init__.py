"""The coordinator, the tuning database, the CLI and the public Python API."""
