"""The bundled quick suite, what a bare ``gcbench run`` measures, gives an answer a user can act on.

Its recommendation ranks stateful (error-feedback) compressors only on a stream of at least
``metrics.min_stream_steps`` steps; shorter, every stateful case is marked "short" and the sentence
that ends the run recommends one and, in the same breath, says not to act on it.  The quick suite
streamed 2 steps against a minimum of 10 and did exactly that, so its stream length is held here
against its own minimum: a later edit of the suite (or of the default minimum) cannot regress it.
"""

from __future__ import annotations

from gcbench.compressors import registry
from gcbench.measure.suite import find_suite, load_suite


def test_a_bare_run_measures_the_quick_suite() -> None:
    assert find_suite(None).name == "quick.toml"


def test_the_quick_suite_streams_long_enough_to_rank_its_stateful_compressors() -> None:
    suite = load_suite("quick")
    cards = [(c, registry.get(c.name)) for c in suite.compressors]
    stateful = [c.label for c, card in cards if card.resolve_flags(card.resolve(c.params)).stateful]
    # without a stateful compressor the minimum would not apply and this test would check nothing
    assert stateful, "the quick suite has no stateful compressor"
    for i, src in enumerate(suite.sources):
        assert src.steps is not None and src.steps >= suite.metrics.min_stream_steps, (
            f"suites/quick.toml: sources[{i}].steps = {src.steps} is shorter than metrics.min_stream_steps = "
            f"{suite.metrics.min_stream_steps}: {', '.join(stateful)} would be marked short and the recommendation disowned")
