"""A plain training script (gradscope's engine) whose hand-written softmax overflows on a bad batch.

    python sample_scripts/train_softmax.py --steps 6 --bad-step 3
    gradscope run --nan sample_scripts/train_softmax.py --steps 6 --bad-step 3
"""
import argparse

import gradscope as gs
from gradscope import nn


class Gate(nn.Module):
    """Softmax gating written by hand: exp() overflows for large scores."""

    def __init__(self, width):
        super().__init__()
        self.score = nn.Linear(width, width)

    def forward(self, x):
        weights = gs.exp(self.score(x))
        weights = weights / weights.sum(-1, keepdim=True)
        return x * weights


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--bad-step", type=int, default=-1)
    args = parser.parse_args()

    gs.manual_seed(0)
    model = nn.Sequential(Gate(8), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    optimizer = gs.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    inputs = gs.randn(32, 8)
    labels = gs.randint(0, 3, (32,))
    for step in range(args.steps):
        batch = inputs * 1e4 if step == args.bad_step else inputs
        optimizer.zero_grad()
        loss = loss_fn(model(batch), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
