"""Tensor dtype names accepted in specs (torch-free, so validation needs no torch import)."""

#: spec name -> torch dtype attribute name
DTYPE_NAMES = {
    "float": "float32", "float32": "float32",
    "double": "float64", "float64": "float64",
    "float16": "float16", "half": "float16",
    "bfloat16": "bfloat16",
    "int": "int32", "int32": "int32",
    "long": "int64", "int64": "int64",
    "int8": "int8", "int16": "int16", "uint8": "uint8",
    "bool": "bool",
    "complex64": "complex64", "complex128": "complex128",
}

#: dtypes whose tensors may require grad (and do by default).
DIFFERENTIABLE = frozenset({"float32", "float64", "float16", "bfloat16", "complex64", "complex128"})

#: bytes per element, for memory estimates.
ITEM_SIZE = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "int8": 1,
    "int16": 2, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
}


#: torch dtype name -> the short form tables print (``bf16``).
SHORT_NAMES = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int32": "i32",
    "int64": "i64", "int8": "i8", "int16": "i16", "uint8": "u8", "bool": "bool",
    "complex64": "c64", "complex128": "c128",
}


def short_dtype(name: object) -> str:
    """``float`` / ``torch.bfloat16`` / ``bfloat16`` -> ``f32`` / ``bf16`` (unknown: as given)."""
    text = str(name).removeprefix("torch.")
    return SHORT_NAMES.get(DTYPE_NAMES.get(text, text), text)


def is_differentiable(spec_dtype: str) -> bool:
    return DTYPE_NAMES.get(spec_dtype) in DIFFERENTIABLE


#: ``layout`` arg values (spec name = torch attribute name).
LAYOUT_NAMES = ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")

#: ``memory_format`` arg values (spec name = torch attribute name).
MEMORY_FORMAT_NAMES = ("contiguous_format", "preserve_format", "channels_last",
                       "channels_last_3d")

#: Non-finite float/double arg values, written as strings (JSON numbers are finite).
NON_FINITE_FLOATS = ("inf", "-inf", "nan")
