"""Results: the typed record, its metrics, the store (write, load, find runs), phases, run comparison and paper baselines.

``gcbench.results`` was one module until 0.2; its names are still found here, with a
:class:`DeprecationWarning`, and live in :mod:`gcbench.results.store`.
"""

from gcbench._compat import forwarder

__getattr__ = forwarder("gcbench.results", "gcbench.results.store")
