"""tidemq.net.acl: authentication and authorisation of requests, RocketMQ's ACL 1.0 and
ACL 2.0 models through one gate.

* :mod:`~tidemq.net.acl.perm` -- PUB / SUB / DENY and their text form.
* :mod:`~tidemq.net.acl.whitelist` -- remote-address patterns (``192.168.1.*``).
* :mod:`~tidemq.net.acl.accounts` -- ``plain_acl.yml``: accounts, reloaded on change.
* :mod:`~tidemq.net.acl.policy` -- ACL 2.0: users, resource patterns, policies, decisions.
* :mod:`~tidemq.net.acl.users` -- ACL 2.0 users as the gate's principals.
* :mod:`~tidemq.net.acl.migrate` -- ``plain_acl.yml`` accounts as ACL 2.0 users and ACLs.
* :mod:`~tidemq.net.acl.principal` -- what the gate asks of either model.
* :mod:`~tidemq.net.acl.table` -- the permission every request code needs.
* :mod:`~tidemq.net.acl.gate` -- the interceptor that checks every request.
"""

from tidemq.net.acl.accounts import Account, AclFile, AclRules, parse_acl
from tidemq.net.acl.gate import AclGate
from tidemq.net.acl.perm import Perm, parse_perm
from tidemq.net.acl.table import PERMISSIONS, Need, Rule

__all__ = ["PERMISSIONS", "Account", "AclFile", "AclGate", "AclRules", "Need", "Perm",
           "Rule", "parse_acl", "parse_perm"]
