# The PyTorch twin of sample_models/transformer.py: the same model and data, written with torch.
# A tiny transformer block (embedding, multi-head self-attention, layer norms, GELU MLP) that
# learns to predict the next token of a repeating sequence. It uses compute_loss(model, batch)
# to flatten the logits, and Adam through make_optimizer.
# What you should see: a healthy gradient flow through every sub-layer, no findings;
# `check --overfit` passes.
import torch
from torch import nn, optim

torch.manual_seed(0)
VOCAB, WIDTH, LENGTH = 12, 16, 6


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, num_heads=2, batch_first=True)
        self.norm1 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 32), nn.GELU(), nn.Linear(32, WIDTH))
        self.norm2 = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        attended, _ = self.attention(x, x, x, need_weights=False)
        x = self.norm1(x + attended)
        x = self.norm2(x + self.mlp(x))
        return self.head(x)


model = TinyTransformer()
criterion = nn.CrossEntropyLoss()


def compute_loss(model, batch):
    tokens, targets = batch
    logits = model(tokens)
    return criterion(logits.reshape(-1, VOCAB), targets.reshape(-1))


def make_optimizer(parameters):
    return optim.Adam(parameters, lr=3e-3)


def batch(step):
    generator = torch.Generator().manual_seed(9000 + step)
    starts = torch.randint(0, VOCAB, (8, 1), generator=generator)
    sequence = (starts + torch.arange(LENGTH + 1).reshape(1, -1)) % VOCAB
    return sequence[:, :-1], sequence[:, 1:]
