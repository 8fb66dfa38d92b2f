"""How dtrain's Python layer hands arrays to the C extension.

The extension takes anything with the buffer protocol (numpy arrays,
memoryview, bytearray, array.array) and refuses, naming the argument, what
it cannot use in place. PyTorch tensors have no buffer protocol, so a CPU
tensor is passed as tensor.numpy(), a numpy array over the tensor's own
memory: still no copy. A tensor on another device, or of a type numpy does
not have, is refused here with the argument named.
"""


def is_tensor(x):
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def view(x, arg):
    """The array the extension receives for argument `arg`."""
    if not is_tensor(x):
        return x
    if x.device.type != "cpu":
        raise TypeError(
            f"argument '{arg}': a tensor on {x.device}; dtrain takes CPU "
            "tensors (move it with .cpu(), a copy dtrain does not make "
            "for you)")
    try:
        # (detach() only when needed: it costs as much as numpy() itself)
        return (x.detach() if x.requires_grad else x).numpy()
    except (TypeError, RuntimeError) as e:
        raise TypeError(f"argument '{arg}': {e}") from None
