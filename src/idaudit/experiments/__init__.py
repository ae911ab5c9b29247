"""Experiments over many runs: the paper's suites and TOML grids (``suites``), run resumably in a
process pool or on Ray (``sweep``), their results averaged over seeds (``aggregate``) and drawn
(``figures``).
"""
