"""The compressors: one card and one implementation per compressor family.

* ``cards/<family>.py`` — the torch-free card of each compressor (:class:`gcbench.core.info.CompressorInfo`):
  what it is, its parameters, flags, bench target, traffic bound and protocol.  The registry reads
  these without importing torch.
* ``<family>.py`` — the implementation: a :class:`gcbench.core.compressor.Compressor` subclass
  carrying its card (``info = <NAME>_CARD``), imported when the compressor is first created.
* ``registry.py`` — every card by name, built-in or from another package's entry point.
* ``<family>/`` — an implementation large enough to be a package of its own: ``lgc/`` (its autoencoder in
  ``lgc/autoencoder.py``).
* ``_common.py``, ``_sparsify.py``, ``_sparse.py`` (sparse bodies) — helpers shared by implementations.

Adding a compressor is adding a card module and an implementation module here (docs/adding.md); a
compressor in another package registers through the entry-point group
``gcbench.compressors`` instead.
"""
