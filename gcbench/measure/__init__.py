"""Measuring: suites, units of exchange, the runner, fidelity and timing, and the isolated kernel bench."""
