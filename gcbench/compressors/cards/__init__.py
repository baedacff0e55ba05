"""The built-in compressor cards, one module per family, each defining ``CARDS``; torch-free by rule (a test checks it)."""
