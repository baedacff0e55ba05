"""Results: the typed record, its metrics, the store (write, load, find runs), phases, run comparison and paper baselines."""
