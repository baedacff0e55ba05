"""Pricing a step or a run on a cluster: the cost model, compute time, time to accuracy, advise and the decision."""
