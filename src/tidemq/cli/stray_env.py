"""``TIDEMQ_*`` variables a server starts with that set nothing: each is named in a warning
with the configuration key it is closest to, since a misspelt key would otherwise be
ignored without a word.

A variable counts as known when it names a key of any TideMQ server (a broker, its store,
a name server, a controller, the web console: one environment often serves several) or is
one of :data:`OTHER_VARIABLES`, which TideMQ's commands and tests read for other purposes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tidemq.cli.markup import escape, say

__all__ = ["OTHER_VARIABLES", "warn_stray_env"]

#: ``TIDEMQ_*`` variables that are not configuration keys: the clients' (and so the admin
#: commands', the console's and the Spark jobs') credentials, TLS and tracing, the
#: addresses the admin commands reach, the console's HTTPS files, the native-code switch,
#: and what the test suite and benchmarks read.
OTHER_VARIABLES = frozenset({
    "TIDEMQ_ACCESS_KEY", "TIDEMQ_SECRET_KEY", "TIDEMQ_TLS", "TIDEMQ_TLS_CA",
    "TIDEMQ_TLS_CERT", "TIDEMQ_TLS_KEY", "TIDEMQ_TLS_KEY_PASSWORD", "TIDEMQ_MSG_TRACE",
    "TIDEMQ_MAX_FRAME_SIZE", "TIDEMQ_NAMESRV", "TIDEMQ_CONTROLLER", "TIDEMQ_CONSOLE_CERT",
    "TIDEMQ_CONSOLE_KEY", "TIDEMQ_NO_NATIVE", "TIDEMQ_PORT_SLICE", "TIDEMQ_SLOW",
    "TIDEMQ_KILLS", "TIDEMQ_HA_KILLS", "TIDEMQ_TEST_STOP_AT", "TIDEMQ_RECORD_GOLDEN",
    "TIDEMQ_WRITE_BENCH_OUTPUT", "TIDEMQ_CONSOLE_SCREENSHOTS",
})


def warn_stray_env(env: Mapping[str, str] | None = None) -> None:
    """Warn, a line each, of the ``TIDEMQ_*`` variables of ``env`` (default:
    ``os.environ``) that nothing reads."""
    from tidemq.broker.config import BrokerConfig
    from tidemq.console.config import ConsoleConfig
    from tidemq.formats.javaprops import stray_env
    from tidemq.namesrv.config import NamesrvConfig
    from tidemq.namesrv.controller.config import ControllerConfig
    from tidemq.store.config import StoreConfig

    classes = (BrokerConfig, StoreConfig, NamesrvConfig, ControllerConfig, ConsoleConfig)
    found = stray_env(classes, os.environ if env is None else env, other=OTHER_VARIABLES)
    for name, key in found.items():
        hint = f": did you mean {key} (TIDEMQ_{key.upper()})?" if key else ""
        say(f"[yellow]warning:[/] environment variable {escape(name)} names no "
            f"configuration key (ignored){hint}")
