"""Reports: runs loaded (:mod:`~gcbench.report.load`), turned into views (:mod:`~gcbench.report.views`), and
rendered for the terminal (:mod:`~gcbench.report.terminal`), Markdown (:mod:`~gcbench.report.markdown`), CSV
(:mod:`~gcbench.report.export`) and HTML (:mod:`~gcbench.report.html`).

``gcbench.report`` was one module until 0.2; its names are still found here, with a
:class:`DeprecationWarning`, and are re-exported by :mod:`gcbench.report.terminal`.
"""

from gcbench._compat import forwarder

__getattr__ = forwarder("gcbench.report", "gcbench.report.terminal")
