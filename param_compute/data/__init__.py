"""Tensor data: the arguments a data spec describes, made (values, structure, layout, seeds)."""
