"""Real multi-process training: the DDP communication hook, ``gcbench train`` and the network model."""
