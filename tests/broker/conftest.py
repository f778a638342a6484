"""Broker tests run against the integration cluster (tests/integration/conftest.py)."""

from tests.integration.conftest import cluster, namesrv, peer

__all__ = ["cluster", "namesrv", "peer"]
