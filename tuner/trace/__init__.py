"""Traces: instructions plus decisions; replay, JSON, mutation of decisions."""
