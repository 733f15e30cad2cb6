"""Making failures small and placing them in time: shrinking, hints, repairs (nearest working
configurations), bisection over releases and commits. Pure. Imports model and search.
"""
