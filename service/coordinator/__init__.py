"""The coordinator: the REST API (v1) and the logic behind it.

`app.create_app` mounts one router per resource (`routes/`), with the
settings, schemas and dependencies beside it; jobs, leases, tokens and
records are the coordinator's logic over the tuning database (`service/db/`);
`runner` drives jobs with the tuner's loop; `metrics` serves Prometheus.
"""
