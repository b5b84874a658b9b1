"""One router per resource under /v1."""
