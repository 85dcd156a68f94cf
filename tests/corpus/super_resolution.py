"""Sub-pixel super-resolution in the style of pytorch/examples/super_resolution (model.py, main.py)."""
from math import log10

import numpy as np
import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()

        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(8, 8, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(8, 4, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(4, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)


criterion = nn.MSELoss()


def corpus_model():
    return Net(upscale_factor=3)


def corpus_batch(rng):
    inputs = torch.tensor(rng.uniform(0, 1, (2, 1, 6, 6)), dtype=torch.get_default_dtype())
    target = torch.tensor(rng.uniform(0, 1, (2, 1, 18, 18)), dtype=torch.get_default_dtype())
    return inputs, target


def corpus_loss(model, batch):
    input, target = batch
    return criterion(model(input), target)


def corpus_train(model, batch):
    optimizer = optim.Adam(model.parameters(), lr=0.01)
    epoch_loss = 0
    for iteration in range(3):
        input, target = batch[0], batch[1]
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
    return epoch_loss


def corpus_eval(model, batch):
    avg_psnr = 0
    with torch.no_grad():
        input, target = batch[0], batch[1]
        prediction = model(input)
        mse = criterion(prediction, target)
        psnr = 10 * log10(1 / mse.item())
        avg_psnr += psnr
    out_img_y = prediction[0].detach().numpy()
    out_img_y *= 255.0
    out_img_y = out_img_y.clip(0, 255)
    return avg_psnr, float(out_img_y.sum())
