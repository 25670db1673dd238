"""The sampler check catches samplers whose draws or state break the contract."""

from __future__ import annotations

import random
import shutil

import pytest

from grpo_run import (
    NoConfig,
)
from grpo_run.testing import (
    check_sampler,
)

HAVE_BWRAP = shutil.which("bwrap") is not None
FAST = 0.5
"""Scorer time limit for this module's own (instant) verifiers."""



# =============================================================================================
# Samplers that break the contract
# =============================================================================================


class CyclingSampler:
    """Rows in order, over and over; the state is the position."""

    name = "cycling"
    Config = NoConfig

    def __init__(self, config: NoConfig, rows, seed: int) -> None:
        self.rows, self.position = list(rows), seed % len(rows)

    def sample(self, n: int):
        out = [self.rows[(self.position + i) % len(self.rows)] for i in range(n)]
        self.position += n
        return out

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state) -> None:
        self.position = int(state["position"])


class ForgetfulSampler(CyclingSampler):
    name = "forgetful"

    def load_state_dict(self, state) -> None:
        pass


class ShortSampler(CyclingSampler):
    name = "short"

    def sample(self, n: int):
        return super().sample(n)[:-1]


class RngStateSampler(CyclingSampler):
    """Keeps a ``random.Random`` in its state: not plain data."""

    name = "rng-state"

    def __init__(self, config: NoConfig, rows, seed: int) -> None:
        super().__init__(config, rows, seed)
        self.rng = random.Random(seed)

    def state_dict(self):
        return {"position": self.position, "rng": self.rng}


class LiveStateSampler(CyclingSampler):
    """Returns its live state dict, which keeps changing after the checkpoint took it."""

    name = "live-state"

    def __init__(self, config: NoConfig, rows, seed: int) -> None:
        super().__init__(config, rows, seed)
        self.state = {"position": self.position}

    def sample(self, n: int):
        out = super().sample(n)
        self.state["position"] = self.position
        return out

    def state_dict(self):
        return self.state


class CopyingSampler(CyclingSampler):
    name = "copying"

    def sample(self, n: int):
        return [{**row, "id": f"copy-{row['id']}"} for row in super().sample(n)]


def test_samplers() -> None:
    check_sampler(CyclingSampler)
    # 12 rows drawn before the state (10 rows + 2), so the original resumes at row 2, a fresh one at row 0.
    with pytest.raises(AssertionError, match=r"^sampler 'forgetful': resume: after load_state_dict, sample\(3\) drew "
                                             r"ids \['row-0', 'row-1', 'row-2'\]; the original sampler drew "
                                             r"\['row-2', 'row-3', 'row-4'\]$"):
        check_sampler(ForgetfulSampler)
    with pytest.raises(AssertionError, match=r"^sampler 'short': sample: sample\(12\) returned 11 rows, expected a "
                                             r"list of 12 rows$"):
        check_sampler(ShortSampler)
    with pytest.raises(AssertionError, match=r"^sampler 'rng-state': plain state: state_dict\(\) .* does not survive "
                                             r"torch\.save/torch\.load\(weights_only=True\)"):
        check_sampler(RngStateSampler)
    with pytest.raises(AssertionError, match=r"^sampler 'live-state': plain state: the dict returned by state_dict\(\) "
                                             r"changed as the sampler kept drawing"):
        check_sampler(LiveStateSampler)
    with pytest.raises(AssertionError, match=r"^sampler 'copying': sample: sample\(12\) returned .*'copy-row-0'.*, "
                                             r"which is not one of the given rows$"):
        check_sampler(CopyingSampler)


