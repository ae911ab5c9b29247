"""Encoders by registry name (``encoders``), which part of an encoder's output is the embedding
(``embedding_choice``), and their saved form, the self-describing safetensors checkpoint
(``checkpoint``): the train → audit contract.
"""
