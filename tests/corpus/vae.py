"""Variational autoencoder in the style of pytorch/examples/vae/main.py."""
import numpy as np
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(784, 40)
        self.fc21 = nn.Linear(40, 20)
        self.fc22 = nn.Linear(40, 20)
        self.fc3 = nn.Linear(20, 40)
        self.fc4 = nn.Linear(40, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


device = torch.device("cpu")


def corpus_model():
    return VAE().to(device)


def corpus_batch(rng):
    return torch.tensor(rng.uniform(0, 1, (3, 1, 28, 28)), dtype=torch.get_default_dtype())


def corpus_loss(model, data):
    recon_batch, mu, logvar = model(data)
    return loss_function(recon_batch, data, mu, logvar)


def corpus_train(model, data):
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    train_loss = 0
    losses = []
    for batch_idx in range(3):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        losses.append(loss.item() / len(data))
    return losses, train_loss


def corpus_eval(model, data):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        recon_batch, mu, logvar = model(data)
        test_loss += loss_function(recon_batch, data, mu, logvar).item()
        n = min(data.size(0), 8)
        comparison = torch.cat([data[:n],
                              recon_batch.view(3, 1, 28, 28)[:n]])
        sample = torch.randn(4, 20).to(device)
        sample = model.decode(sample).cpu()
    return test_loss, comparison, sample.view(4, 1, 28, 28)
