"""What a run is made of: configurations and their tokens, outcomes, failure signatures, findings.
Imports nothing of bisect_spec but errors and versions.
"""
