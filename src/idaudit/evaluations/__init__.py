"""Evaluations of an encoder, each one request → one function: ``audit`` (arrays → metrics → gate →
verdict), ``consistency`` (do runs agree up to a rotation?), ``plan`` (latent straight lines
against the oracle), and their reports (``report``: rich tables, Markdown, JUnit).
"""
