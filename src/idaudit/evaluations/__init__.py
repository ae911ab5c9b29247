"""Evaluations of an encoder over one pipeline (``pipeline``): target → evaluation set → the input
it expects → embeddings → checked arrays (``inputs``) → metrics → gate (``gate``). ``audit``
(a verdict), ``consistency`` (do runs agree up to a rotation?) and ``plan`` (latent straight
lines against the oracle) are thin over it, each one request → one function; ``report``
renders them (rich tables, Markdown, JUnit).
"""
