"""tidemq.console."""
