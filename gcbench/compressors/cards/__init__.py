"""The built-in compressor cards, one module per family, each defining ``CARDS``; torch-free by rule (a test checks it).

A card states its five flags on one line, always all five and in one order (``biased, stateful,
error_feedback, deterministic, reconstructed``), so cards read alike and a flag left at its default is
still written down; a "why" comment goes on the line above.
"""
