"""tidemq.codec: the sans-IO RocketMQ remoting codec (docs/reference/remoting.md).

Bytes in, commands out, and back; no asyncio, no sockets, no clock.

* :mod:`~tidemq.codec.frame` -- :class:`FrameDecoder` and :func:`encode_command`;
* :mod:`~tidemq.codec.command` / :mod:`~tidemq.codec.header` -- the command and its JSON
  and ROCKETMQ header serializations;
* :mod:`~tidemq.codec.schema` / :mod:`~tidemq.codec.headers` -- typed custom headers;
* :mod:`~tidemq.codec.bodies` -- JSON bodies;
* :mod:`~tidemq.codec.message` -- pull bodies to messages, messages to send requests,
  with :mod:`~tidemq.codec.compression` and :mod:`~tidemq.codec.uniqkey`.
"""

from tidemq.lazy import stub_exports

__all__, __getattr__ = stub_exports(__name__, __file__)
