"""kvattn_host_tensor descriptors over torch CPU tensors' own memory, for
the CPU paths of the attention ops and of the serving plan."""

import ctypes

import torch

from .. import capi

# torch dtype -> kvattn dtype name (FP8 caches by their codes).
DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16",
               torch.bfloat16: "bf16", torch.int32: "i32",
               torch.int64: "i64", torch.bool: "i1",
               torch.float8_e4m3fn: "f8E4M3FN", torch.float8_e5m2: "f8E5M2"}


def is_dense_host(t: torch.Tensor) -> bool:
    """Whether t is a dense row-major CPU tensor of a dtype kvattn takes:
    host_tensor reads it as it is."""
    return (t.dtype in DTYPE_NAMES and t.device.type == "cpu"
            and t.is_contiguous())


def host_tensor(t: torch.Tensor, keep: list) -> capi.HostTensor:
    """A kvattn_host_tensor over t's memory (is_dense_host(t)); `keep`
    holds what must outlive the call (t and the shape array)."""
    shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    keep.append(t)
    keep.append(shape)
    return capi.HostTensor(t.data_ptr() or None,
                           capi.DTYPE_CODE[DTYPE_NAMES[t.dtype]], t.dim(),
                           shape)
