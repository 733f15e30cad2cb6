"""Real launch_server runs: supervision, classification, Ray launches. Imports model, runtime and
inside.
"""
