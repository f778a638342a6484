"""Server-side translation of logical queues (RIP-21 phase 2) and their admin codes.

Clients -- TideMQ's and plain RocketMQ remoting clients alike -- address ``(topic,
logical queue id)`` under the placeholder broker ``__logical__``; the name server points
that placeholder at one broker of the mapping (the gateway). Whichever broker receives a
request for a mapped topic translates it:

* **send**: to the LQ's NORMAL segment; appended here if this broker holds it, else
  forwarded to the segment's broker with ``lo=false`` (already physical). The answer's
  queue offset is made logical. With no NORMAL segment but a PENDING one (a migration
  between seal and commit) the send is held until the commit arrives, then delivered;
  after ``MOVE_WAIT`` the answer is SYSTEM_BUSY "moved" -- retriable. With neither (the
  LQ was sealed by a decrease) it is NO_PERMISSION.
* **pull**: the readable segment holding the logical offset; records come back with
  QUEUEID and QUEUEOFFSET rewritten to the logical queue and offset (a copy -- the only
  place where pull bodies are not zero-copy). A sealed segment's end moves the reader to
  the next segment; long polling happens on the open one only, and pulls held on a
  segment are answered when it is sealed. A commit piggy-backed on a pull is logical.
* **offsets**: consumer offsets are stored in logical terms here and replicated oneway to
  the mapping's other brokers; min/max come from the segments, time search walks them
  oldest first, and INVOKE_BROKER_TO_RESET_OFFSET resets in logical terms.

A request carrying ``lo=false`` is physical and goes to the ordinary processors -- except
that a send to a physical queue of a sealed or pending segment is refused ("moved"), the
fence that keeps exactly one writable segment per LQ, and that a pull of one is never
held. A broker whose forward fails for a lost connection asks the name server for the
brokers' addresses again (a restarted broker may listen elsewhere).

The translation is an interceptor of the broker's request pipeline
(:mod:`tidemq.broker.pipeline`), so batch-protocol children are translated like requests;
a translated request runs on the registered handler of its code, past the interceptors
that admitted the original.

Admin codes (docs/protocol.md): 20100 UPDATE_LOGICAL_QUEUE_MAPPING (body = mapping JSON),
20101 QUERY_LOGICAL_QUEUE_MAPPING, 20102 SEAL_LOGICAL_QUEUE, 20103
DELETE_LOGICAL_QUEUE_MAPPING.

==============  ============================================================================
module          owns
==============  ============================================================================
translation     the interceptor: which requests are translated, fenced or left alone
sends           sends, held through a migration's seal-to-commit window
pulls           pulls, across sealed segments
offsets         consumer offsets, min/max, time search and reset in logical terms
mappings        the admin codes, expiry, the topic config a mapped topic registers
sync            the convergence of the brokers' copies of a mapping
ends            how far other brokers' segments are known to reach (for a forced cut)
forwarding      running a physical request here or on the segment's broker; addresses
==============  ============================================================================
"""

from tidemq.broker.processors.logical.mappings import logical_topic_config
from tidemq.broker.processors.logical.translation import LogicalProcessor

__all__ = ["LogicalProcessor", "logical_topic_config"]
