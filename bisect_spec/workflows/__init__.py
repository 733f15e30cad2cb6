"""What a command does, end to end: probe results, nightly matrices, release timelines, commit
bisection, the release smoke. Imports every layer below.
"""
