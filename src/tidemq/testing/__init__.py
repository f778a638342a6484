"""Test support: in-process clusters (name server + brokers on port 0)."""

from tidemq.testing.cluster import Cluster

__all__ = ["Cluster"]
