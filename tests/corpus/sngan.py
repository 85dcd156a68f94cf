"""A spectrally normalised GAN in the style of common SNGAN re-implementations (christiancosgrove/
pytorch-spectral-normalization-gan): SpectralNorm convolutions, hinge loss, Adam(0.0, 0.9)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.utils import spectral_norm

channels = 3
leak = 0.1
w_g = 2
Z_dim = 8


class Generator(nn.Module):
    def __init__(self, z_dim):
        super(Generator, self).__init__()
        self.z_dim = z_dim

        self.model = nn.Sequential(
            nn.ConvTranspose2d(z_dim, 16, 4, stride=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.ConvTranspose2d(16, 8, 4, stride=2, padding=(1,1)),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.ConvTranspose2d(8, channels, 3, stride=1, padding=(1,1)),
            nn.Tanh())

    def forward(self, z):
        return self.model(z.view(-1, self.z_dim, 1, 1))


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()

        self.conv1 = spectral_norm(nn.Conv2d(channels, 8, 3, stride=1, padding=(1,1)))
        self.conv2 = spectral_norm(nn.Conv2d(8, 8, 4, stride=2, padding=(1,1)))
        self.conv3 = spectral_norm(nn.Conv2d(8, 16, 3, stride=1, padding=(1,1)))
        self.fc = spectral_norm(nn.Linear(w_g * w_g * 16, 1))

    def forward(self, x):
        m = x
        m = nn.LeakyReLU(leak)(self.conv1(m))
        m = nn.LeakyReLU(leak)(self.conv2(m))
        m = nn.LeakyReLU(leak)(self.conv3(m))
        return self.fc(m.view(-1,w_g * w_g * 16))


# the generator's convolution biases feed BatchNorm: their gradient is zero up to rounding, which
# Adam (beta1 = 0) turns into steps of +-lr in float32
CORPUS_TOLERANCE = {"train": {"float32": (2e-3, 1e-3)}}


def corpus_model():
    return {"generator": Generator(Z_dim), "discriminator": Discriminator()}


def corpus_batch(rng):
    return torch.tensor(rng.uniform(-1, 1, (3, channels, 4, 4)), dtype=torch.get_default_dtype())


def corpus_loss(nets, data):
    z = torch.randn(data.size(0), Z_dim)
    disc_loss = nn.ReLU()(1.0 - nets["discriminator"](data)).mean() + \
        nn.ReLU()(1.0 + nets["discriminator"](nets["generator"](z))).mean()
    return disc_loss


def corpus_train(nets, data):
    generator, discriminator = nets["generator"], nets["discriminator"]
    optim_disc = optim.Adam(filter(lambda p: p.requires_grad, discriminator.parameters()), lr=2e-4, betas=(0.0,0.9))
    optim_gen  = optim.Adam(generator.parameters(), lr=2e-4, betas=(0.0,0.9))
    disc_iters = 2
    history = []
    for batch_idx in range(2):
        # update discriminator
        for _ in range(disc_iters):
            z = torch.randn(data.size(0), Z_dim)
            optim_disc.zero_grad()
            optim_gen.zero_grad()
            disc_loss = nn.ReLU()(1.0 - discriminator(data)).mean() + nn.ReLU()(1.0 + discriminator(generator(z))).mean()
            disc_loss.backward()
            optim_disc.step()

        z = torch.randn(data.size(0), Z_dim)

        # update generator
        optim_disc.zero_grad()
        optim_gen.zero_grad()
        gen_loss = -discriminator(generator(z)).mean()
        gen_loss.backward()
        optim_gen.step()
        history.append((disc_loss.item(), gen_loss.item()))
    return history
