"""A small C3D-style video classifier (3-D convolutions over clips) with a 3-D convolutional
autoencoder head, in the style of public action-recognition and video-prediction code: Conv3d,
BatchNorm3d, MaxPool3d, AvgPool3d, AdaptiveAvgPool3d, ConvTranspose3d and F.conv3d."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class C3D(nn.Module):
    def __init__(self, num_classes=3, in_channels=3):
        super(C3D, self).__init__()
        self.conv1 = nn.Conv3d(in_channels, 4, kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.bn1 = nn.BatchNorm3d(4)
        self.pool1 = nn.MaxPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2))
        self.conv2 = nn.Conv3d(4, 6, kernel_size=3, padding=1, stride=(1, 1, 1))
        self.bn2 = nn.BatchNorm3d(6)
        self.pool2 = nn.MaxPool3d(kernel_size=2, stride=2, ceil_mode=True)
        self.conv3 = nn.Conv3d(6, 6, kernel_size=(1, 3, 3), padding="same", padding_mode="replicate")
        self.pool3 = nn.AvgPool3d(kernel_size=(1, 2, 2), stride=1, padding=(0, 1, 1), count_include_pad=False)
        self.gap = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(6, num_classes)
        self.decoder = nn.Sequential(
            nn.ConvTranspose3d(6, 4, kernel_size=(1, 2, 2), stride=(1, 2, 2)),
            nn.ReLU(inplace=True),
            nn.ConvTranspose3d(4, in_channels, kernel_size=3, stride=(1, 2, 2), padding=1, output_padding=(0, 1, 1)),
        )
        self.temporal = nn.Parameter(torch.ones(1, 1, 2, 1, 1) / 2)
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def encode(self, x):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        return self.pool3(F.relu(self.conv3(x)))

    def forward(self, x):
        h = self.encode(x)
        logits = self.fc(self.gap(h).flatten(1))
        smoothed = F.conv3d(h.mean(1, keepdim=True), self.temporal, padding=(1, 0, 0))
        return logits, self.decoder(h[:, :, :, :-1, :-1]), smoothed


def corpus_model():
    return C3D(num_classes=3)


def corpus_batch(rng):
    clips = torch.tensor(rng.normal(size=(2, 3, 4, 8, 8)), dtype=torch.get_default_dtype())
    labels = torch.tensor(rng.integers(0, 3, size=2))
    return clips, labels


def corpus_loss(model, batch):
    clips, labels = batch
    logits, recon, smoothed = model(clips)
    target = F.adaptive_avg_pool3d(clips, recon.shape[2:])
    return F.cross_entropy(logits, labels) + F.mse_loss(recon, target) + smoothed.pow(2).mean()


def corpus_train(model, batch):
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = corpus_loss(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def corpus_eval(model, batch):
    model.eval()
    with torch.no_grad():
        logits, recon, _ = model(batch[0])
        pooled, where = F.max_pool3d(batch[0], 2, return_indices=True)
        peak = F.adaptive_max_pool3d(batch[0], (2, 2, 2))
    return logits.softmax(dim=1), recon, pooled, where, peak
