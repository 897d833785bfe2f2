"""PARAM's ``lib.pytorch``: the PyTorch side of the library API (``load_modules`` accepts it)."""
