"""Reports: runs loaded (:mod:`~gcbench.report.load`), turned into views (:mod:`~gcbench.report.views`), and
rendered for the terminal (:mod:`~gcbench.report.terminal`), Markdown (:mod:`~gcbench.report.markdown`), CSV
(:mod:`~gcbench.report.export`) and HTML (:mod:`~gcbench.report.html`).
"""
