"""A data-parallel training script (PyTorch, DDP or FSDP2) that runs under torchrun.

    torchrun --nproc-per-node 2 sample_scripts/train_ddp.py --steps 6 --bad-step 3
    gradscope run --nproc 2 --nan sample_scripts/train_ddp.py --steps 6 --bad-step 3

Rank r's batch at step s is ``randn(6, 4)`` from a generator seeded ``100 * s + r``. With
``--bad-step K``, rank 1's batch at step K holds a row of zeros, which the first module
(``Normalize``) turns into NaN (0 / 0). ``--fsdp`` shards the model with FSDP2's
``fully_shard`` instead of wrapping it in ``DistributedDataParallel``.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn


class Normalize(nn.Module):
    def forward(self, x):
        return x / x.norm(dim=1, keepdim=True)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(Normalize(), nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def batch(step, rank):
    return torch.randn(6, 4, generator=torch.Generator().manual_seed(100 * step + rank))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--bad-step", type=int, default=-1)
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to wait after each step")
    parser.add_argument("--print-pid", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = make_model()
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.print_pid:
        print(f"pid {os.getpid()}", flush=True)
    for step in range(args.steps):
        x = batch(step, rank)
        if step == args.bad_step and rank == 1:
            x[2] = 0.0
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
        time.sleep(args.sleep)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
