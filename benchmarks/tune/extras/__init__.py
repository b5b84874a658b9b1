"""The tuning benchmark's optional experiments, one module each."""
