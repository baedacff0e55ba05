"""Reports: the terminal and Markdown renderers (:mod:`~gcbench.report.terminal`) and the HTML report.

``gcbench.report`` was one module until 0.2; its names are still found here, with a
:class:`DeprecationWarning`, and live in :mod:`gcbench.report.terminal`.
"""

from gcbench._compat import forwarder

__getattr__ = forwarder("gcbench.report", "gcbench.report.terminal")
