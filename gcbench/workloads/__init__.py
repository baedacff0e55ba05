"""What is trained: the tasks and model problems ``gcbench converge`` and ``gcbench train`` run, and the compressor
lists they compare (shared by both commands, so neither imports the other)."""
