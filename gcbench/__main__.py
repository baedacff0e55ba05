"""``python -m gcbench`` runs the command line."""

from gcbench.cli import main

main()
