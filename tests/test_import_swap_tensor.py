"""The import swap on model code written for PyTorch: the same source runs with ``import torch``
and with ``import gradscope as torch``; with the same weights, loss and gradients agree.

The models use the tensor API real code leans on: ``register_buffer(torch.tril(...))``,
``masked_fill``, ``view``/``transpose``/``contiguous``, ``torch.arange(device=...)``,
``multinomial``/``topk`` sampling under ``no_grad``, ``p.data`` updates, ``new_zeros``,
``torch.device`` and ``torch.cuda.is_available()``, in-place ReLU and residual blocks.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

MODEL_SOURCE = '''
import math
import torch
import torch.nn as nn
from torch.nn import functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.0)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab_size=11, n_embd=16, n_head=2, n_layer=2, block_size=8):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, block_size, n_embd))
        self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0)
        x = self.tok_emb(idx) + self.pos_emb[:, pos[0], :]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        return F.relu(out)


class TinyResNet(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.layer1 = BasicBlock(4, 4)
        self.layer2 = BasicBlock(4, 8, stride=2)
        self.linear = nn.Linear(8, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer2(self.layer1(out))
        out = F.adaptive_avg_pool2d(out, (1, 1))
        out = torch.flatten(out, 1)
        return self.linear(out)


def sgd_step(model, lr):
    for p in model.parameters():
        if p.grad is not None:
            p.data.add_(p.grad.data, alpha=-lr)
            p.grad = p.grad.new_zeros(p.grad.shape)
'''

SWAPS = [("import torch.nn as nn", "import gradscope.nn as nn"),
         ("from torch.nn import functional as F", "from gradscope.nn import functional as F"),
         ("import torch\n", "import gradscope as torch\n")]


def _load(swap: bool) -> types.ModuleType:
    source = MODEL_SOURCE
    if swap:
        for old, new in SWAPS:
            assert old in source
            source = source.replace(old, new)
    module = types.ModuleType("gradscope_swapped" if swap else "torch_original")
    exec(compile(source, module.__name__, "exec"), module.__dict__)
    return module


def _copy_weights(torch_model, gs_model) -> None:
    import gradscope as gs

    state = {name: gs.tensor(value.detach().numpy()) for name, value in torch_model.state_dict().items()}
    gs_model.load_state_dict(state)


def _compare(torch_model, gs_model, torch_loss, gs_loss, rtol: float = 2e-4) -> None:
    np.testing.assert_allclose(gs_loss.item(), torch_loss.item(), rtol=rtol)
    torch_grads = {n: p.grad for n, p in torch_model.named_parameters()}
    gs_grads = {n: p.grad for n, p in gs_model.named_parameters()}
    assert torch_grads.keys() == gs_grads.keys()
    for name, grad in torch_grads.items():
        np.testing.assert_allclose(gs_grads[name].numpy(), grad.numpy(), rtol=rtol, atol=2e-6, err_msg=name)


def test_char_gpt_trains_like_torch_after_the_import_swap() -> None:
    import gradscope as gs

    original, swapped = _load(False), _load(True)
    torch.manual_seed(0)
    torch_model = original.CharGPT()
    gs_model = swapped.CharGPT()
    _copy_weights(torch_model, gs_model)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 11, (3, 8))
    targets = rng.integers(0, 11, (3, 8))
    targets[0, :2] = -1
    for step in range(3):
        _, torch_loss = torch_model(torch.tensor(idx), torch.tensor(targets))
        _, gs_loss = gs_model(gs.tensor(idx), gs.tensor(targets))
        torch_loss.backward()
        gs_loss.backward()
        _compare(torch_model, gs_model, torch_loss, gs_loss)
        original.sgd_step(torch_model, 0.5)
        swapped.sgd_step(gs_model, 0.5)
    generated = gs_model.generate(gs.tensor(idx[:1, :3]), 6, top_k=3)
    assert tuple(generated.shape) == (1, 9) and generated.dtype == gs.int64
    assert not generated.requires_grad


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_resnet_blocks_match_torch_after_the_import_swap(train: bool) -> None:
    import gradscope as gs

    original, swapped = _load(False), _load(True)
    torch.manual_seed(1)
    torch_model = original.TinyResNet()
    gs_model = swapped.TinyResNet()
    _copy_weights(torch_model, gs_model)
    torch_model.train(train)
    gs_model.train(train)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, (2,))
    for _ in range(2):
        torch_loss = torch.nn.functional.cross_entropy(torch_model(torch.tensor(x)), torch.tensor(y))
        gs_loss = gs.nn.functional.cross_entropy(gs_model(gs.tensor(x)), gs.tensor(y))
        torch_loss.backward()
        gs_loss.backward()
        _compare(torch_model, gs_model, torch_loss, gs_loss)
        original.sgd_step(torch_model, 0.1)
        swapped.sgd_step(gs_model, 0.1)
    for name, buffer in torch_model.state_dict().items():
        np.testing.assert_allclose(gs_model.state_dict()[name].numpy(), buffer.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=name)
