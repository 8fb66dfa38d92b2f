"""How dtrain's Python layer hands arrays to the C extension.

The extension takes anything with the buffer protocol (numpy arrays,
memoryview, bytearray, array.array) and refuses, naming the argument, what
it cannot use in place. PyTorch tensors have no buffer protocol, so a CPU
tensor is passed as tensor.numpy(), a numpy array over the tensor's own
memory: still no copy. A tensor on another device, or of a type numpy does
not have, is refused here with the argument named.

view() runs once per array of every call, so it is kept short: a small
allreduce from Python costs about a microsecond more than from C, and
most of that is tensor.numpy() itself. The checks use what PyTorch answers
fastest (type identity, Tensor.is_cpu rather than Tensor.device, which
builds a device object at every call).
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
    """The array the extension receives for argument `arg`."""
    if type(x) is not _Tensor and not is_tensor(x):
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
