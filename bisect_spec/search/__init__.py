"""Which configurations to evaluate: the flag space, covering arrays, fitting, sweep strategies
(plans), branch rows, masking rounds, peeling, the random search. Pure: predicates in,
configurations out. Imports model.
"""
