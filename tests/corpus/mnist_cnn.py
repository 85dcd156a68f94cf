"""MNIST convolutional classifier in the style of pytorch/examples/mnist/main.py."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    losses = []
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args["log_interval"] == 0:
            losses.append(loss.item())
            if args["dry_run"]:
                break
    return losses


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader) * 2
    return test_loss, correct


CORPUS_FLOAT64 = False
use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")


def corpus_model():
    return Net().to(device)


def corpus_batch(rng):
    data = torch.from_numpy(rng.standard_normal((2, 1, 28, 28)).astype(np.float32))
    target = torch.from_numpy(rng.integers(0, 10, 2))
    return data, target


def corpus_loss(model, batch):
    data, target = batch
    return F.nll_loss(model(data), target)


def corpus_train(model, batch):
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    args = {"log_interval": 1, "dry_run": False}
    losses = []
    for epoch in range(1, 3):
        losses += train(args, model, device, [batch, batch], optimizer, epoch)
        scheduler.step()
    return losses, optimizer.param_groups[0]["lr"]


def corpus_eval(model, batch):
    return test(model, device, [batch])
