"""Pure functions of arrays and tensors: the training objectives (``losses``), the linear fits
(``linear``), one pass of moments (``moments``), the Theorem 3 bound and its terms (``bounds``),
the Gaussianity test (``gaussianity``), label-free signals (``labelfree``), the audit's metrics
composed (``metrics``) and their catalogue (``catalogue``). No files, no CLI.
"""
