"""tidemq.net.acl: authentication and authorisation of requests, RocketMQ ACL 1.0 style.

* :mod:`~tidemq.net.acl.perm` -- PUB / SUB / DENY and their text form.
* :mod:`~tidemq.net.acl.whitelist` -- remote-address patterns (``192.168.1.*``).
* :mod:`~tidemq.net.acl.accounts` -- ``plain_acl.yml``: accounts, reloaded on change.
* :mod:`~tidemq.net.acl.table` -- the permission every request code needs.
* :mod:`~tidemq.net.acl.gate` -- the interceptor that checks every request.
"""

from tidemq.net.acl.accounts import Account, AclFile, AclRules, parse_acl
from tidemq.net.acl.gate import AclGate
from tidemq.net.acl.perm import Perm, parse_perm
from tidemq.net.acl.table import PERMISSIONS, Need, Rule

__all__ = ["PERMISSIONS", "Account", "AclFile", "AclGate", "AclRules", "Need", "Perm",
           "Rule", "parse_acl", "parse_perm"]
