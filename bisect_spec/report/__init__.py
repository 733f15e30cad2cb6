"""Data in, text out: sweep summaries, the report model and its Markdown, JSON, JUnit and HTML forms,
plain-text rendering, reproducers and bug reports. Imports model and search.
"""
