"""idaudit: did your self-supervised encoder learn the world (its latents up to a rotation)?"""

__version__ = "0.1.0"
