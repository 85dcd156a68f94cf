"""Model code written once against ``torch`` runs on gradscope by swapping the imports: a small
transformer, a U-Net-style block (Upsample, InstanceNorm, ReflectionPad, PixelShuffle,
DataParallel) and an LSTM over packed sequences, with identical weights on both engines; the
loss, every gradient and a few optimizer steps with a OneCycle schedule agree with torch."""
from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

import gradscope

torch = pytest.importorskip("torch")


def engine(name: str) -> tuple:
    """``(torch, nn, F, optim)`` of one engine, as ``import torch; from torch import nn; ...`` gives."""
    root = importlib.import_module(name)
    return (root, importlib.import_module(f"{name}.nn"), importlib.import_module(f"{name}.nn.functional"),
            importlib.import_module(f"{name}.optim"))


def define_models(T: Any, nn: Any, F: Any) -> dict:
    """The model file: plain PyTorch code, parametrised only by the imported modules."""

    class TinyTransformer(nn.Module):
        def __init__(self, vocab: int = 11, d_model: int = 16, heads: int = 2) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
            layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=32, dropout=0.0, batch_first=True,
                                               norm_first=True, activation="gelu")
            self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.norm = nn.RMSNorm(d_model)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, tokens: Any) -> Any:
            length = tokens.size(1)
            mask = nn.Transformer.generate_square_subsequent_mask(length)
            hidden = self.encoder(self.embed(tokens), mask=mask, src_key_padding_mask=tokens == 0)
            return self.head(self.norm(hidden))

    class UpBlock(nn.Module):
        def __init__(self, channels: int = 4) -> None:
            super().__init__()
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.conv = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(2 * channels, channels, 3),
                                      nn.InstanceNorm2d(channels, affine=True), nn.LeakyReLU(0.2, inplace=True),
                                      nn.Dropout2d(0.0))
            self.shuffle = nn.Sequential(nn.Conv2d(channels, 4 * channels, 1), nn.PixelShuffle(2),
                                         nn.ReplicationPad2d((0, 1, 0, 1)), nn.AdaptiveMaxPool2d(4))

        def forward(self, low: Any, skip: Any) -> Any:
            x = T.cat([self.up(low), skip], dim=1)
            x = self.conv(x)
            return self.shuffle(x) + F.interpolate(x, size=(4, 4), mode="nearest")

    class PackedTagger(nn.Module):
        def __init__(self, vocab: int = 9, hidden: int = 6, tags: int = 3) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, 5, padding_idx=0)
            self.lstm = nn.LSTM(5, hidden, num_layers=2, bidirectional=True, batch_first=True)
            self.out = nn.Linear(2 * hidden, tags)

        def forward(self, tokens: Any, lengths: Any) -> Any:
            packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                                       enforce_sorted=False)
            output, (h_n, _) = self.lstm(packed)
            padded, _ = nn.utils.rnn.pad_packed_sequence(output, batch_first=True)
            return self.out(padded), h_n

    return {"transformer": TinyTransformer, "unet": UpBlock, "lstm": PackedTagger}


def data(kind: str) -> dict:
    rng = np.random.default_rng(7)
    if kind == "transformer":
        tokens = rng.integers(1, 11, (3, 6))
        tokens[1, 4:] = 0
        return {"tokens": tokens}
    if kind == "unet":
        return {"low": rng.standard_normal((2, 4, 3, 3)).astype(np.float32),
                "skip": rng.standard_normal((2, 4, 6, 6)).astype(np.float32),
                "target": rng.standard_normal((2, 4, 4, 4)).astype(np.float32)}
    tokens = rng.integers(1, 9, (4, 5))
    lengths = np.array([5, 2, 4, 3])
    for row, length in enumerate(lengths):
        tokens[row, length:] = 0
    return {"tokens": tokens, "lengths": lengths, "tags": rng.integers(0, 3, (4, 5))}


def loss_of(kind: str, model: Any, T: Any, F: Any, batch: dict) -> Any:
    if kind == "transformer":
        tokens = T.tensor(batch["tokens"])
        logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1), ignore_index=0,
                               label_smoothing=0.1)
    if kind == "unet":
        out = model(T.tensor(batch["low"]), T.tensor(batch["skip"]))
        return F.smooth_l1_loss(out, T.tensor(batch["target"]))
    logits, h_n = model(T.tensor(batch["tokens"]), T.tensor(batch["lengths"]))
    tags = T.tensor(batch["tags"])[:, :logits.size(1)]
    mask = T.tensor(batch["tokens"])[:, :logits.size(1)] != 0
    per_token = F.cross_entropy(logits.transpose(1, 2), tags, reduction="none")
    return (per_token * mask).sum() / mask.sum() + 0.01 * h_n.pow(2).mean()


def train(name: str, kind: str, initial: dict | None = None) -> tuple:
    T, nn, F, optim = engine(name)
    T.manual_seed(0)
    model = define_models(T, nn, F)[kind]()
    if kind == "unet":
        model = nn.DataParallel(model)
    if initial is not None:
        model.load_state_dict({k: gradscope.tensor(v) for k, v in initial.items()})
    start = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    # SGD rather than Adam here: some gradients are exactly zero in theory (key-projection biases,
    # a conv bias before InstanceNorm) and Adam would blow their rounding noise up to full steps.
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    scheduler = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=5)
    batch = data(kind)
    losses, first_grads = [], None
    for _ in range(3):
        opt.zero_grad()
        loss = loss_of(kind, model, T, F, batch)
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()
                           if p.grad is not None}
        opt.step()
        scheduler.step()
        losses.append(float(loss))
    params = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    return start, losses, first_grads, params


@pytest.mark.parametrize("kind", ["transformer", "unet", "lstm"])
def test_model_code_agrees_after_import_swap(kind: str) -> None:
    reference, ref_losses, ref_grads, ref_params = train("torch", kind)
    _, losses, grads, params = train("gradscope", kind, reference)
    np.testing.assert_allclose(losses, ref_losses, rtol=2e-5)
    assert sorted(grads) == sorted(ref_grads)
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, ref_grads[name], rtol=1e-4, atol=2e-6, err_msg=name)
    for name, value in params.items():
        np.testing.assert_allclose(value, ref_params[name], rtol=1e-4, atol=2e-6, err_msg=name)
    if kind == "unet":
        assert all(name.startswith("module.") for name in params)
