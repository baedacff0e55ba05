"""The ``gcbench train`` command: real torch.distributed training of one model under each compressor, one process per rank."""
