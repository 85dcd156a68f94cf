"""The older MNIST example: Variable, Dropout2d, x.view(-1, 320), SGD with momentum."""
from __future__ import print_function
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x)


# F.dropout above has a fixed rate: compare in evaluation mode, where it is the identity
CORPUS_TRAIN_MODE = False
CORPUS_FLOAT64 = False


def corpus_model():
    model = Net()
    if torch.cuda.is_available():
        model.cuda()
    return model


def corpus_batch(rng):
    data = torch.from_numpy(rng.standard_normal((3, 1, 28, 28)).astype(np.float32))
    target = torch.LongTensor(rng.integers(0, 10, 3).tolist())
    return data, target


def corpus_loss(model, batch):
    data, target = batch
    data, target = Variable(data), Variable(target)
    output = model(data)
    return F.nll_loss(output, target)


def corpus_train(model, batch):
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    losses = []
    for step in range(3):
        data, target = Variable(batch[0]), Variable(batch[1])
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.data.item())
    return losses


def corpus_eval(model, batch):
    model.eval()
    test_loss = 0
    correct = 0
    data, target = batch
    with torch.no_grad():
        data, target = Variable(data), Variable(target)
        output = model(data)
        test_loss += F.nll_loss(output, target, size_average=False).data.item()
        pred = output.data.max(1, keepdim=True)[1]
        correct += pred.eq(target.data.view_as(pred)).long().cpu().sum().item()
    return test_loss, correct, output
