"""Model importers: each reads a file format into an `ir.graph.Graph` (imports only `ir`)."""
