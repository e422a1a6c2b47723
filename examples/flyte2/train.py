"""A Flyte 2 elastic training task whose environment comes from elastic.yaml (beside this file).

    pip install 'elastic-compile[flyte2]'
    flyte deploy examples/flyte2/train.py env

Every pod imports this module again, so the image needs elastic-compile as well as flyte
and flyteplugins-pytorch, and ``include`` ships elastic.yaml with the code bundle.
"""

from __future__ import annotations

import os
from pathlib import Path

import flyte

from elastic_compile.flyte2 import environment_kwargs

SPEC = Path(__file__).with_name("elastic.yaml")

env = flyte.TaskEnvironment(**environment_kwargs(SPEC), include=(SPEC.name,))


@env.task
def train(epochs: int = 1) -> float | None:
    """Each worker process runs this (nproc_per_node of them per pod).

    Returns the last loss from global rank 0; the other pods return None, which is why
    the return type is Optional (until flyte-sdk#1398 makes them skip their outputs).
    """
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(16, 1).to(device), device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.zeros(())
    for _ in range(epochs):
        x = torch.randn(32, 16, device=device)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()
    return float(loss)
