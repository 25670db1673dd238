"""The plugin contract: hookspecs, the table of families, component protocols and optional
abilities, the data components exchange, the typed registry and the host that fills it."""
