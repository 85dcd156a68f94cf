# A healthy MLP classifier (3 Gaussian blobs in 8 dimensions, 2 hidden ReLU layers).
# What you should see: gradients of similar magnitude in every layer, no findings;
# `gradscope check` passes and `gradscope watch --nan` trains without stopping.
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)
CENTERS = gs.randn(3, 8) * 2.0

model = nn.Sequential(
    nn.Linear(8, 32),
    nn.ReLU(),
    nn.Linear(32, 32),
    nn.ReLU(),
    nn.Linear(32, 3),
)
loss_fn = nn.CrossEntropyLoss()


def batch(step):
    generator = gs.Generator().manual_seed(1000 + step)
    labels = gs.randint(0, 3, (32,), generator=generator)
    inputs = CENTERS[labels] + gs.randn(32, 8, generator=generator)
    return inputs, labels
