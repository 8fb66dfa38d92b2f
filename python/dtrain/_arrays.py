"""How dtrain's Python layer hands arrays to the C extension.

The extension takes anything with the buffer protocol (numpy arrays,
memoryview, bytearray, array.array) and PyTorch CPU tensors, which it
reads through their own accessors (buf.c): the library works in the
tensor's memory, with no copy, and refuses, naming the argument, what it
cannot use in place (a tensor on another device, not contiguous, of
another type). So view() passes a tensor as it is; numpy_view() gives the
numpy array over a tensor's memory for the few places that work on it in
Python (reshaping, a byte view).
"""
import sys

_Tensor = None  # torch.Tensor, once torch is imported


def is_tensor(x):
    """True for a torch.Tensor, without importing torch."""
    global _Tensor
    if _Tensor is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        _Tensor = torch.Tensor
    return isinstance(x, _Tensor)


def view(x, arg):
    """The array the extension receives for argument `arg`: x itself (a
    tensor is checked by the extension)."""
    return x


def numpy_view(x, arg):
    """x as a numpy array over the same memory (x itself if not a
    tensor); a tensor on another device, or of a type numpy does not
    have, is refused with the argument named."""
    if not is_tensor(x):
        return x
    if not x.is_cpu:
        raise TypeError(
            f"argument '{arg}': a tensor on {x.device}; dtrain takes CPU "
            "tensors (move it with .cpu(), a copy dtrain does not make "
            "for you)")
    try:
        # (detach() only when needed: it costs as much as numpy() itself)
        return (x.detach() if x.requires_grad else x).numpy()
    except (TypeError, RuntimeError) as e:
        raise TypeError(f"argument '{arg}': {e}") from None
