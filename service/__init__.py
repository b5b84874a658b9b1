"""The service: `cli/` (the `loomtune` command), `coordinator/` (the REST API and its logic),
`db/` (the tuning database), `tuning` (tuning embedded in this process) and `client`
(the coordinator's Python client, re-exported by the `loomtune` module)."""
