"""tidemq.testing."""
