"""The REST API (v1): one router per resource, mounted by `service.app.create_app`."""
