from tidemq.net.address import format_address, parse_address
from tidemq.net.blocking import BlockingClient
from tidemq.net.client import RemotingClient
from tidemq.net.connection import (
    DEFAULT_IDLE_SECONDS,
    CloseCallback,
    Connection,
    ConnState,
    RequestHandler,
)
from tidemq.net.dispatcher import Dispatcher, Processor
from tidemq.net.errors import ExceptionMapping, map_exceptions, network_errors
from tidemq.net.server import RemotingServer

__all__ = [
    "DEFAULT_IDLE_SECONDS",
    "BlockingClient",
    "CloseCallback",
    "ConnState",
    "Connection",
    "Dispatcher",
    "ExceptionMapping",
    "Processor",
    "RemotingClient",
    "RemotingServer",
    "RequestHandler",
    "format_address",
    "map_exceptions",
    "network_errors",
    "parse_address",
]
