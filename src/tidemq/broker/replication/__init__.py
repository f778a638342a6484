"""Master/replica replication of a broker group (see ``docs/replication.md``).

:mod:`~tidemq.broker.replication.role` holds the role a broker plays and the one object
that changes it, whether a static configuration or a controller decides.
"""
