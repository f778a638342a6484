"""``python -m tidemq ...`` is the ``tidemq`` command."""

from tidemq.cli.main import main

main()
