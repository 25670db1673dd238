"""The fake-tensor counter: floating-point tensors are simulated and counted (rounded to 512 bytes,
freed when their storage goes), integer bookkeeping stays real, reads of simulated values are
stand-ins, and writing simulated values into a real tensor is refused."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from grpo_run.core.memory.fake import FakeDevice, SimulationError


def test_floating_point_tensors_are_counted_until_freed() -> None:
    with FakeDevice() as device:
        a = torch.zeros(1024, 1024)  # 4 MiB, a multiple of 512
        b = torch.empty(100, dtype=torch.bfloat16)  # 200 bytes -> 512
        assert isinstance(a, FakeTensor) and isinstance(b, FakeTensor)
        assert device.counter.live == 4 * 2**20 + 512
        view = a[:10]  # a view shares the storage: nothing new
        assert device.counter.live == 4 * 2**20 + 512
        c = a * 2  # a new storage
        assert device.counter.live == 2 * 4 * 2**20 + 512
        del a, view
        assert device.counter.live == 4 * 2**20 + 512  # a's storage freed; c and b remain
        del c
    assert device.counter.peak == 2 * 4 * 2**20 + 512


def test_integer_bookkeeping_stays_real_and_reads_of_simulated_values_are_stand_ins() -> None:
    with FakeDevice() as device:
        ids = torch.tensor([3, 0, 5])
        where = torch.nonzero(ids)[:, 0]  # a data-dependent shape: real, so it runs
        weights = torch.ones(4, 4)
        norm = float(weights.norm())  # no data to read: a stand-in
        assert not isinstance(ids, FakeTensor) and where.tolist() == [0, 2]
        assert norm == 1.0
        assert device.counter.live == 512  # only the simulated 64 bytes, rounded


def test_writing_simulated_values_into_a_real_tensor_is_refused() -> None:
    real = torch.zeros(3)
    with FakeDevice():
        simulated = torch.ones(3)
        with pytest.raises(SimulationError, match="writes simulated values into a real torch.float32 tensor"):
            real.copy_(simulated)
