"""The `fluxnode` subcommands (click), one module per command or group.

`fluxnode.cli` maps each name to its module and imports it only when it runs. Commands
parse options and print; the work is done by the packages below them.
"""
