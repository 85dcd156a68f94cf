"""Twelve sigmoid layers trained with SGD (gradscope's engine): the first layers' gradients vanish.

    gradscope run sample_scripts/train_deep_sigmoid.py

Their gradients are around 1e-10, so an update of lr x gradient is below the float32 resolution
of their weights: the optimizer holds them, yet they never change.
"""
import gradscope as torch
from gradscope import nn

torch.manual_seed(0)
layers = []
for _ in range(12):
    layers += [nn.Linear(16, 16), nn.Sigmoid()]
model = nn.Sequential(*layers, nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 16), torch.randn(32, 1)
for step in range(5):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
