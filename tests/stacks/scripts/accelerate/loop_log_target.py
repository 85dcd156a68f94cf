"""An accelerate training loop (CPU, bf16 mixed precision: accelerate wraps the model's forward in
autocast) whose loss compares the model's output with log(target); target 13 is negative, so
log() makes NaN in batch 3, from values that need no gradient."""
import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=True, mixed_precision="bf16")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs, targets = torch.randn(32, 4), torch.rand(32, 1) + 0.5
targets[13] = -1.0
loader = DataLoader(TensorDataset(inputs, targets), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, (batch, target) in enumerate(loader):
    output = model(batch)
    loss = (output.float() - torch.log(target)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")
