"""A tiny real DDP training run: small model, synthetic data, gloo on CPU.

Each worker prints its loss per step and the world size, so an elastic run shows when
nodes join or leave. Run it through elastic-launch (or ``elastic-compile run``):

    elastic-launch --nproc-per-node 2 -- python examples/train_tiny.py --steps 20
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step, to watch elasticity")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    torch.manual_seed(0)  # the same initial weights on every rank; DDP also broadcasts rank 0's
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(1234 + rank)  # each rank its own shard of synthetic data
    true_w = torch.arange(8, dtype=torch.float32) / 8
    for step in range(args.steps):
        x = torch.randn(32, 8, generator=data)
        y = x @ true_w + 0.1
        loss = nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        loss.backward()  # DDP averages gradients over all ranks here
        optimizer.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} world_size {world} restart {restart}", flush=True)
        time.sleep(args.step_seconds)
    dist.barrier()
    if rank == 0:
        print(f"done world_size {world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
