"""A Lightning Trainer on two CPU processes (devices=2, strategy="ddp"). The model divides its
features by a per-sample count, guarded by torch.where; sample 9 has count 0, which rank 1 meets
at its step 2 (the script's own sampler: rank r takes samples r, r + 2, r + 4, ... in order). The
forward pass stays finite; the division's backward makes NaN."""
import sys

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Sampler, TensorDataset

DEVICES = int(sys.argv[1]) if len(sys.argv) > 1 else 2


class RankSlice(Sampler):
    def __init__(self, length):
        self.length = length

    def __iter__(self):
        rank, world = (torch.distributed.get_rank(), torch.distributed.get_world_size()) \
            if torch.distributed.is_initialized() else (0, 1)
        return iter(range(rank, self.length, world))

    def __len__(self):
        return self.length // (torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1)


class CountNorm(nn.Module):
    def forward(self, x, counts):
        return torch.where(counts > 0, x / counts, torch.zeros_like(x))


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.norm = CountNorm()
        self.head = nn.Linear(8, 1)

    def forward(self, x, counts):
        return self.head(self.norm(torch.tanh(self.encoder(x)), counts))

    def training_step(self, batch, batch_idx):
        x, counts, y = batch
        return F.mse_loss(self(x, counts), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=generator)
    counts = torch.randint(1, 5, (16, 1), generator=generator).float()
    counts[9] = 0.0
    y = torch.randn(16, 1, generator=generator)
    loader = DataLoader(TensorDataset(x, counts, y), batch_size=2, sampler=RankSlice(16))
    trainer = L.Trainer(accelerator="cpu", devices=DEVICES, strategy="ddp" if DEVICES > 1 else "auto", max_steps=4,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False)
    trainer.fit(Regressor(), loader)
    print(f"rank {trainer.global_rank}: done after {trainer.global_step} steps")
