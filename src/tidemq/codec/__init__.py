"""tidemq.codec."""
