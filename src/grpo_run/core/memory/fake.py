"""Run torch code on fake tensors and count the memory its tensors would hold.

A :class:`FakeDevice` is a dispatch mode that runs every operation touching a floating-point
tensor on torch's fake tensors (``FakeTensorMode``: shapes, dtypes and storages, no data, no
allocation), and counts the bytes of every storage they create until it is freed. Weights,
gradients, optimizer state and activations are all floating point, so they are all simulated
and counted. Integer and boolean tensors -- token ids, masks, index and layout bookkeeping, a
few bytes per token -- stay real, so code that reads them (``nonzero``, ``.tolist()``, sizes
computed from them) runs unchanged; they are not counted.

Reading a simulated value (``.item()``, ``float(t)``) gives a stand-in (1, 1.0 or False): no
allocation of the step depends on one, only metrics. Writing simulated values into a real
tensor is an error (:class:`SimulationError`) rather than a silent wrong count.

Each storage is counted as the CUDA caching allocator would hand it out: rounded up to 512
bytes. What the count cannot see: the allocator's cached reserve and fragmentation, the CUDA
context, NCCL buffers and the workspaces kernels allocate outside torch.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

ROUNDING = 512
"""Bytes: the CUDA caching allocator's smallest block and rounding."""

_aten = torch.ops.aten
_FLOAT_FACTORIES = {
    _aten.empty.memory_format, _aten.empty_strided.default, _aten.zeros.default, _aten.ones.default,
    _aten.full.default, _aten.rand.default, _aten.randn.default, _aten.empty_like.default,
}
"""Factories whose dtype defaults to the floating-point default when none is given."""


class SimulationError(RuntimeError):
    """The simulated code did something a fake-tensor run cannot stand in for."""


class StorageCounter:
    """Live and peak bytes of the storages handed to it, each counted once until it is freed, at
    its current size (a storage resized in place -- FSDP2 frees and re-allocates its unsharded
    parameters so -- is counted at its new size)."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def add(self, value: Any) -> None:
        for t in tree_leaves(value):
            if isinstance(t, FakeTensor):
                self.add_storage(t.untyped_storage())

    def add_storage(self, storage: Any) -> None:
        if storage in self._seen:
            return
        cell = [_rounded(storage.nbytes())]
        self._seen[storage] = (weakref.ref(storage, lambda _ref, cell=cell: self._free(cell[0])), cell)
        self.live += cell[0]
        self.peak = max(self.peak, self.live)

    def resized(self, storage: Any) -> None:
        """``storage`` (of a simulated tensor) was resized in place."""
        if storage not in self._seen:
            self.add_storage(storage)
            return
        cell = self._seen[storage][1]
        size = _rounded(storage.nbytes())
        self.live += size - cell[0]
        cell[0] = size
        self.peak = max(self.peak, self.live)

    def _free(self, size: int) -> None:
        self.live -= size

    def reset_peak(self) -> None:
        """Start a new peak from what is live now."""
        self.peak = self.live


class FakeDevice(TorchDispatchMode):
    """While entered: floating-point tensors are simulated and counted (see the module docstring).

    >>> with FakeDevice() as device:
    ...     x = torch.zeros(1024, 1024)
    >>> device.counter.peak
    4194304
    """

    def __init__(self) -> None:
        super().__init__()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.counter = StorageCounter()
        self._resize: Any = None

    def __enter__(self) -> FakeDevice:
        # A storage resized in place (FSDP2's free_storage / alloc_storage) is not an op the mode
        # sees: the counter follows it through UntypedStorage.resize_ while the mode is on.
        real, counter = torch.UntypedStorage.resize_, self.counter

        def resize_(storage: Any, size: int) -> Any:
            out = real(storage, size)
            if storage.device.type == "meta":  # a simulated tensor's storage
                counter.resized(storage)
            return out

        self._resize = real
        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(is_traceable_wrapper_subclass(t) for t in tensors):
            return NotImplemented  # a DTensor: its own dispatch runs the op on its local tensors, which come back here
        if any(isinstance(mode, FakeTensorMode) for mode in _get_current_dispatch_mode_stack()):
            return func(*args, **kwargs)  # shapes only, in a fake mode of the caller's (DTensor's sharding propagation)
        simulated = any(isinstance(t, FakeTensor) for t in tensors)
        if simulated and func is _aten._local_scalar_dense.default:
            return _stand_in(args[0].dtype)
        if not tensors:
            simulated = _floating_factory(func, kwargs)
        if not simulated:
            return func(*args, **kwargs)
        _refuse_real_writes(func, args)
        with self.fake_mode:
            out = func(*args, **kwargs)
        self._forget_outputs()
        self.counter.add(out)
        return out

    def _forget_outputs(self) -> None:
        """Drop the fake mode's memo of the tensors it just made. The memo holds a weak reference
        to each, and ``Module.to()`` (which swaps a fake parameter for its converted copy, e.g. in
        peft's LoRA wrap) refuses to swap a tensor that has one. Each op's outputs are fresh, so
        nothing later looks them up."""
        self.fake_mode.fake_tensor_converter.meta_converter.tensor_memo.clear()


def _rounded(nbytes: int) -> int:
    return -(-nbytes // ROUNDING) * ROUNDING


def _floating_factory(func: Any, kwargs: dict) -> bool:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "meta":
        return False  # asked for shapes only (DTensor's sharding propagation, a deferred init): no memory
    dtype = kwargs.get("dtype")
    if dtype is None:
        return func in _FLOAT_FACTORIES
    return dtype.is_floating_point or dtype.is_complex


def _stand_in(dtype: torch.dtype) -> Any:
    if dtype == torch.bool:
        return False
    return 1.0 if dtype.is_floating_point else 1


def _refuse_real_writes(func: Any, args: tuple) -> None:
    schema = func._schema
    if not schema.is_mutable:
        return
    for argument, value in zip(schema.arguments, args):
        written = argument.alias_info is not None and argument.alias_info.is_write
        if written and isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
            raise SimulationError(f"{func} writes simulated values into a real {value.dtype} tensor of shape "
                                  f"{tuple(value.shape)}: create it as a floating-point tensor inside the simulation")
