"""Bringing encoders in from wherever a project keeps them: what a file is and its opener
(``loaders.open_target``), the one trust rule (``trust``) and what a torch.save file would
allocate (``torch_file_sizes``), torch.export archives vetted, state dicts chosen, the networks
weights load into, and images as other projects' encoders take them.
"""
