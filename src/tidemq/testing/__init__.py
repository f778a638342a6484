"""Test support: in-process clusters (name server + brokers on port 0).

:class:`Cluster` lives in :mod:`tidemq.inprocess`, where product code may use it too.
"""

from tidemq.inprocess import Cluster

__all__ = ["Cluster"]
