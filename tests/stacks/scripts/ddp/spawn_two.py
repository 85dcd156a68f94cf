"""Plain DDP whose ranks the script starts itself with torch.multiprocessing.spawn (with --fork:
start_processes with the fork start method). With --bad, the batch of rank 1 at step 1 holds a
NaN (element 2)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def train(rank, world_size, port, bad):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for step in range(3):
        batch = torch.randn(8, 4, generator=generator)
        if bad and rank == 1 and step == 1:
            batch[2, 0] = float("nan")
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
    if rank == 0:
        print(f"rank {rank}: trained 3 steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if "--fork" in sys.argv:
        mp.start_processes(train, args=(2, port, "--bad" in sys.argv), nprocs=2, start_method="fork")
    else:
        mp.spawn(train, args=(2, port, "--bad" in sys.argv), nprocs=2)
