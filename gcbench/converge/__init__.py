"""Closed-loop convergence: ``gcbench converge``.

Simulated data-parallel training in one process where every update is made from the compressed
aggregate, so a compressor's errors change the trajectory it is measured on.  The layers:

* :mod:`gcbench.workloads.problems` — what is trained: the ``train`` tasks, zoo, Hugging Face and user models;
* :mod:`gcbench.converge.engine` — one seed of one compressor: N workers, the compressor's protocol, the optimizer;
* :mod:`gcbench.converge.seed_summary` — intervals over seeds, gaps paired by seed, steps to a target;
* :mod:`gcbench.converge.build_record` — a compressor's seeds as one ``kind = "converge"`` case;
* :mod:`gcbench.converge.sweep` — settings, suites, the reference first, the results file, progress.

See docs/convergence.md.
"""
