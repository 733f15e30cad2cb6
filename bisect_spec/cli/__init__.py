"""The command line: click commands over bisect_spec.api (``commands``), the one error mapping, terminal output
(``terminal``). The console script enters through ``bisect_spec.entry``."""
