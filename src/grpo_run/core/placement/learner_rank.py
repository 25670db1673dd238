"""One rank of a data-parallel learner: what runs inside a learner process or Ray actor.

The driver (:class:`~grpo_run.core.placement.learner_group.RankedLearnerGroup`) calls the same
method on every rank with the same arguments; the ranks meet in ``torch.distributed``
collectives inside it. Rank 0 answers with the results (metrics, full weights, optimizer state);
the others answer ``None``.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import attrs
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing  # noqa: F401 - registers shared-memory pickling of tensors for the pipe back

from grpo_run.core.config.processes import LearnerSection
from grpo_run.core.learner.learner import build_learner
from grpo_run.core.learner.spec import LearnerSpec
from grpo_run.core.learner.strategies import make_strategy
from grpo_run.core.learner.strategies.held import held_bytes
from grpo_run.core.placement.flat import FlatWeights, decode_sequences
from grpo_run.core.placement.heartbeat import RankHeartbeat
from grpo_run.core.plugins.adapters import LoraAdapter

LEARNER_STATE_DIR = "learner_state"
"""Where in a checkpoint a strategy writes its own files (DeepSpeed's optimizer shards)."""


@attrs.frozen
class RankSetup:
    """Everything a rank needs to start; picklable."""

    spec: LearnerSpec
    learner: LearnerSection
    rank: int
    world_size: int
    init_method: str = ""
    """``tcp://host:port`` of rank 0's rendezvous (or given to :meth:`LearnerRank.start`)."""
    local_rank: int = 0
    """Which of the node's GPUs this rank uses (Ray gives each actor its own: 0 there)."""
    threads: int = 1
    seed: int = 1


class LearnerRank:
    """Builds its learner in :meth:`start` (not in the constructor, so a slow or failing start is
    reported like any call). ``ship_weights`` turns rank 0's flat weights into what goes back to
    the driver (Ray: an object reference)."""

    def __init__(self, setup: RankSetup, ship_weights: Callable[[FlatWeights], Any] | None = None) -> None:
        self.setup = setup
        self.ship_weights = ship_weights
        self.learner: Any = None
        self.heartbeat: RankHeartbeat | None = None

    def start(self, init_method: str | None = None) -> dict[str, Any]:
        """Join the process group (at ``init_method``, default the setup's) and build the learner."""
        s = self.setup
        os.environ["OMP_NUM_THREADS"] = str(s.threads)
        torch.set_num_threads(s.threads)
        torch.manual_seed(s.seed)
        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        cuda = s.spec.model.device.startswith("cuda")
        device = torch.device(f"cuda:{s.local_rank}") if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        backend = s.learner.dist_backend if s.learner.dist_backend != "auto" else ("nccl" if cuda else "gloo")
        # DeepSpeed reads the usual launcher variables.
        os.environ.update(RANK=str(s.rank), WORLD_SIZE=str(s.world_size), LOCAL_RANK=str(s.local_rank))
        rendezvous = init_method or s.init_method
        timeout = datetime.timedelta(seconds=s.learner.collective_timeout_s)
        dist.init_process_group(backend, store=_rendezvous_store(rendezvous, s.rank, s.world_size, timeout),
                                rank=s.rank, world_size=s.world_size, timeout=timeout)
        self.heartbeat = RankHeartbeat(rendezvous, s.rank).start()
        spec = attrs.evolve(s.spec, model=attrs.evolve(s.spec.model, device=str(device)))
        strategy = make_strategy(s.learner, s.rank, s.world_size, device)
        self.learner = build_learner(spec, strategy=strategy)
        parameters = sum(p.numel() for p in self.learner.policy.parameters())
        if s.learner.strategy in ("fsdp2", "deepspeed"):  # sharded: count every rank's part
            parameters = int(strategy.reduce_sum(torch.tensor([float(parameters)], dtype=torch.float64))[0])
        # A reference this rank loaded (LoRA's is the policy with its adapters off: nothing more).
        loaded = self.learner.reference is not None and s.spec.model.lora is None
        return {"rank": s.rank, "pid": os.getpid(), "host": socket.gethostname(), "parameters": parameters,
                "budget_line": self.learner.budget_line,
                "reference_bytes": held_bytes(self.learner.reference) if loaded else 0}

    def train_step(self, encoded: Mapping[str, np.ndarray]) -> dict[str, float] | None:
        metrics = self.learner.train_step(decode_sequences(encoded))
        return metrics if self.setup.rank == 0 else None

    def skip_step(self) -> None:
        self.learner.skip_step()

    def weights(self) -> Any:
        """Rank 0's weights snapshot in one flat buffer (shipped); a LoRA adapter keeps its name and
        config, its tensors flat."""
        state = self.learner.weights_snapshot()  # collective for sharded strategies
        if state is None:
            return None
        tensors = state.tensors if isinstance(state, LoraAdapter) else state
        flat = FlatWeights.from_state_dict(tensors)
        shipped = self.ship_weights(flat) if self.ship_weights is not None else flat
        return attrs.evolve(state, tensors=shipped) if isinstance(state, LoraAdapter) else shipped

    def state_dict(self) -> dict[str, Any] | None:
        state = self.learner.state_dict()  # collective for fsdp2
        # A copy: sent through a local pipe, a tensor's storage is *shared* with the receiver, and
        # the live optimizer state keeps changing.
        return copy.deepcopy(state) if self.setup.rank == 0 else None

    def load_state_dict(self, state: Mapping[str, Any], checkpoint: str) -> None:
        """Every rank gets the checkpoint's learner state (schedule, steps, replicated optimizer
        state; fsdp2 takes rank 0's optimizer state and scatters it) and reads its strategy's files."""
        # A private copy: tensors from a local pipe share storage with every other rank's copy,
        # and the optimizer adopts state tensors as they are.
        self.learner.load_state_dict(copy.deepcopy(dict(state)))
        self.learner.strategy.load_files(Path(checkpoint) / LEARNER_STATE_DIR)

    def save(self, directory: str) -> None:
        """Rank 0 writes the full policy in Hugging Face format; every rank writes its strategy's files."""
        state = self.learner.strategy.full_state_dict()  # collective for sharded strategies
        if self.setup.rank == 0:
            policy = self.learner.policy
            full = without_tied_copies(policy, state) if state is not None else None
            policy.save_pretrained(directory, state_dict=full, safe_serialization=True)
        self.learner.strategy.save_files(Path(directory) / LEARNER_STATE_DIR)

    def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.learner is not None:
            self.learner.strategy.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def without_tied_copies(policy: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` without the second names of tied parameters (a tied ``lm_head.weight``).

    ``save_pretrained`` leaves those out by spotting tensors that share storage; a gathered full
    state dict holds copies that share none, so the checkpoint would carry the embedding twice
    (113 MB more for SmolLM2-135M) and differ from a one-process run's."""
    every = {name for name, _ in policy.named_parameters(remove_duplicate=False)}
    once = {name for name, _ in policy.named_parameters()}
    return {k: v for k, v in state.items() if k not in every - once}


def _rendezvous_store(init_method: str, rank: int, world_size: int, timeout: datetime.timedelta) -> dist.TCPStore:
    """The process group's store at ``tcp://host:port``, listening on ``host`` only.

    torch's own ``init_method`` rendezvous listens on every interface whatever the host; rank 0
    binds the socket itself instead and hands it to the store. On a loopback host (one machine:
    the local backend, a Ray instance started by the run) gloo's connections stay on the
    loopback interface too (``GLOO_SOCKET_IFNAME``, unless set already)."""
    url = urlparse(init_method)
    host, port = url.hostname or "127.0.0.1", int(url.port or 0)
    if ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if rank != 0:
        return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(max(128, world_size * 4))
    return dist.TCPStore(host, port, world_size, is_master=True, timeout=timeout, wait_for_workers=False,
                         master_listen_fd=listener.detach())
