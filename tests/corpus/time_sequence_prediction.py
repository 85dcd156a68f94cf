"""Sine-wave prediction with two LSTMCells and LBFGS, in the style of pytorch/examples/time_sequence_prediction."""
from __future__ import print_function
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 11)
        self.lstm2 = nn.LSTMCell(11, 11)
        self.linear = nn.Linear(11, 1)

    def forward(self, input, future = 0):
        outputs = []
        h_t = torch.zeros(input.size(0), 11, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 11, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 11, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 11, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):# if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


def generate_data(rng, T=20, L=12, N=4):
    x = np.empty((N, L), 'int64')
    x[:] = np.array(range(L)) + rng.integers(-4 * T, 4 * T, N).reshape(N, 1)
    data = np.sin(x / 1.0 / T).astype('float64')
    return data


CORPUS_TOLERANCE = {"train": {"float32": (1e-6, 1e-8), "float64": (1e-6, 1e-8)}}


def corpus_model():
    seq = Sequence()
    seq.double()
    return seq


def corpus_batch(rng):
    data = generate_data(rng)
    input = torch.from_numpy(data[1:, :-1])
    target = torch.from_numpy(data[1:, 1:])
    test_input = torch.from_numpy(data[:1, :-1])
    test_target = torch.from_numpy(data[:1, 1:])
    return input, target, test_input, test_target


def corpus_loss(seq, batch):
    input, target = batch[0], batch[1]
    criterion = nn.MSELoss()
    out = seq(input)
    return criterion(out, target)


def corpus_train(seq, batch):
    input, target, test_input, test_target = batch
    criterion = nn.MSELoss()
    # use LBFGS as optimizer since we can load the whole data to train
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=4)
    #begin to train
    history = []
    for i in range(2):
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            history.append(loss.item())
            loss.backward()
            return loss
        optimizer.step(closure)
        # begin to predict, no need to track gradient here
        with torch.no_grad():
            future = 3
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            history.append(loss.item())
            y = pred.detach().numpy()
    return history, float(y.sum())
