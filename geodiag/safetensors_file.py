"""Old import path of :mod:`geodiag.io.safetensors`, kept because gti and scripts outside
this repository imported it (``from geodiag.safetensors_file import SafetensorsFile``).
New code imports from ``geodiag.io.safetensors``."""

from geodiag.io.safetensors import (
    FLOAT_DTYPES,
    SafetensorsFile,
    bf16_to_float32,
    float32_to_bf16,
    save_file,
)

__all__ = ["FLOAT_DTYPES", "SafetensorsFile", "bf16_to_float32", "float32_to_bf16", "save_file"]
