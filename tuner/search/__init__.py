"""The search: what to measure next (strategies), the loop that measures and teaches them,
the pool that makes their children, and the task scheduler that shares one budget."""
