"""tidemq.store."""
