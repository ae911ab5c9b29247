"""The MuJoCo Reacher pixel world: the renderer in worker processes that never import torch
(``render``), on-disk datasets (``data``), evaluation pairs at any image size (``eval_pairs``),
the world (``world``) and its kind (``kind``).
"""
