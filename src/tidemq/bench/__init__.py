"""tidemq.bench."""
