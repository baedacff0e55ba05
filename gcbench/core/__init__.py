"""The ground floor: the payload and its codecs, the compressor contract, its registry, errors and signals.

Nothing here imports another layer of gcbench.  ``info`` and ``registry`` read the compressor cards
without importing torch or any implementation.
"""
