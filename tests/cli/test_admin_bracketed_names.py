"""mqadmin's lines put names in brackets (``delete topic [orders]``); the console prints
them as markup, where ``[orders]`` -- a bracketed word that starts with a lower-case
letter -- reads as a style tag and would vanish. Every such line keeps the name."""

from __future__ import annotations

import pytest
from tests.cli.conftest import ThreadedCluster
from tests.cli.runner import CliRunner

from tidemq.cli.main import app


def human(cluster: ThreadedCluster, *args: str) -> str:
    result = CliRunner().invoke(app, ["admin", *args, "-n", cluster.namesrv])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(("setup", "command", "shown"), [
    (("updateTopic", "-t", "gone_lower"), ("deleteTopic", "-t", "gone_lower"),
     "delete topic [gone_lower] from every cluster"),
    (("updateSubGroup", "-g", "workers_lower", "-c", "DefaultCluster"),
     ("deleteSubGroup", "-g", "workers_lower", "-c", "DefaultCluster"),
     "delete subscription group [workers_lower] from broker ["),
    (("updateTopic", "-t", "cloned_lower"),
     ("cloneGroupOffset", "-s", "src_lower", "-d", "dest_lower", "-t", "cloned_lower"),
     "srcGroup[src_lower], destGroup=[dest_lower], topic[cloned_lower]"),
    (("updateKvConfig", "-s", "app_lower", "-k", "color", "-v", "[blue]"),
     ("getKvConfig", "-s", "app_lower"), "color [blue]"),
], ids=["deleteTopic", "deleteSubGroup", "cloneGroupOffset", "getKvConfig"])
def test_a_lower_case_name_in_brackets_is_printed(cluster: ThreadedCluster,
                                                  setup: tuple[str, ...],
                                                  command: tuple[str, ...],
                                                  shown: str) -> None:
    human(cluster, *setup)
    assert shown in " ".join(human(cluster, *command).split())  # a title may wrap
