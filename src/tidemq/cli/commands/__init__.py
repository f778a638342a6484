"""Subcommand groups of the ``tidemq`` command."""
