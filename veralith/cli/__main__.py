"""`python -m veralith.cli`: the same as the `veralith` command."""

from veralith.cli.app import main

main()
