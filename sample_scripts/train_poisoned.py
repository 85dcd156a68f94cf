"""A small regression trained with Adam, whose batches can be poisoned with NaN (gradscope's engine).

    python sample_scripts/train_poisoned.py --steps 8 --bad-steps 3,4
    gradscope run --on-nonfinite skip sample_scripts/train_poisoned.py --bad-steps 3,4

``--bad-steps`` lists the steps whose batch holds a NaN; ``--spike-step K`` multiplies the batch
of step K by 1e4 (a bad batch that stays finite); ``--lr-bug K`` makes the learning rate of the
middle layer's parameter group 1000x too high from step K on.
"""
import argparse

import gradscope as torch
from gradscope import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--bad-steps", default="")
    parser.add_argument("--spike-step", type=int, default=-1)
    parser.add_argument("--lr-bug", type=int, default=-1)
    args = parser.parse_args()
    bad = {int(step) for step in args.bad_steps.split(",") if step}
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam([{"params": model[i].parameters()} for i in (0, 2, 4)], lr=0.01)
    target = torch.randn(8, 1)
    for step in range(args.steps):
        x = torch.randn(32, 8)
        y = x @ target
        if step in bad:
            x[0, 0] = float("nan")
        if step == args.spike_step:
            x = x * 1e4
        if step == args.lr_bug:
            optimizer.param_groups[1]["lr"] *= 1000
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
