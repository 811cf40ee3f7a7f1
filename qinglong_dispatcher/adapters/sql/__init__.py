"""Store transactions written once for both dialects, against the `query.Query` interface."""
