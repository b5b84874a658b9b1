"""The probabilistic layer and the search: traces, design spaces, cost models, the tuning loop."""
