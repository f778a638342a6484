"""tidemq.spark."""
