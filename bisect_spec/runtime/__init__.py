"""Where evaluations run: processes and workers, executors (local, Ray), warm workers, release
environments, SGLang sources, profiles, the target, sessions and the run store. Imports model and
inside (as files to run).
"""
