"""Plain DDP whose ranks are started by the script itself with torch.multiprocessing.spawn."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def train(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
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
    mp.spawn(train, args=(2, port), nprocs=2)
