"""The training loop of karpathy/nanoGPT's train.py, its AMP and gradient-scaler pattern as written
for CUDA, run on the CPU (written for these tests, not copied): ``GradScaler(enabled=(dtype ==
'float16'))``, ``scaler.scale(loss).backward()``, ``scaler.unscale_``, ``clip_grad_norm_``,
``scaler.step``, ``scaler.update``. ``--scaler=cuda`` makes a scaler that asks for CUDA and
disables itself ("CUDA is not available. Disabling."). The batch of iteration 3 holds a padded
sequence."""
import sys
import warnings
from contextlib import nullcontext

import numpy as np
import torch

from model import GPT, GPTConfig

batch_size = 4
block_size = 16
max_iters = 6
learning_rate = 6e-4
weight_decay = 1e-1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
gradient_accumulation_steps = 1
device = 'cpu'
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float32'
scaler_kind = 'config'
for arg in sys.argv[1:]:
    key, _, value = arg[2:].partition('=')
    globals()[key] = type(globals()[key])(value)

torch.manual_seed(1337)
device_type = 'cuda' if 'cuda' in device else 'cpu'
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

rng = np.random.default_rng(0)
train_data = rng.integers(1, 32, size=batch_size * (block_size + 1) * max_iters).astype(np.uint16)
padded = 3 * batch_size * (block_size + 1) + (block_size + 1)  # the second sequence of iteration 3
train_data[padded:padded + block_size + 1] = 0


def get_batch(iteration):
    ix = [(iteration * batch_size + row) * (block_size + 1) for row in range(batch_size)]
    x = torch.stack([torch.from_numpy(train_data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(train_data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)


model = GPT(GPTConfig(block_size=block_size))
model.to(device)
if scaler_kind == 'cuda':
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        scaler = torch.amp.GradScaler('cuda')
else:
    scaler = torch.amp.GradScaler('cuda', enabled=(dtype == 'float16'))
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)

X, Y = get_batch(0)
iter_num = 0
while True:
    for micro_step in range(gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch(iter_num + 1)
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item() * gradient_accumulation_steps
    print(f"iter {iter_num}: loss {lossf:.4f}")
    iter_num += 1
    if iter_num >= max_iters:
        break
