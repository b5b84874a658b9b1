"""The search: strategies that pick what to measure next, the pool that makes their children, the task scheduler."""
