"""Character-level GRU generator in the style of spro/char-rnn.pytorch (model.py, train.py, generate.py)."""
import string

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable

all_characters = string.printable
n_characters = len(all_characters)


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, model="gru", n_layers=1):
        super(CharRNN, self).__init__()
        self.model = model.lower()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers

        self.encoder = nn.Embedding(input_size, hidden_size)
        if self.model == "gru":
            self.rnn = nn.GRU(hidden_size, hidden_size, n_layers)
        elif self.model == "lstm":
            self.rnn = nn.LSTM(hidden_size, hidden_size, n_layers)
        self.decoder = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden):
        batch_size = input.size(0)
        encoded = self.encoder(input)
        output, hidden = self.rnn(encoded.view(1, batch_size, -1), hidden)
        output = self.decoder(output.view(batch_size, -1))
        return output, hidden

    def forward2(self, input, hidden):
        encoded = self.encoder(input.view(1, -1))
        output, hidden = self.rnn(encoded.view(1, 1, -1), hidden)
        output = self.decoder(output.view(1, -1))
        return output, hidden

    def init_hidden(self, batch_size):
        if self.model == "lstm":
            return (Variable(torch.zeros(self.n_layers, batch_size, self.hidden_size)),
                    Variable(torch.zeros(self.n_layers, batch_size, self.hidden_size)))
        return Variable(torch.zeros(self.n_layers, batch_size, self.hidden_size))


def char_tensor(string):
    tensor = torch.zeros(len(string)).long()
    for c in range(len(string)):
        try:
            tensor[c] = all_characters.index(string[c])
        except:
            continue
    return tensor


def random_training_set(chunks, chunk_len, batch_size):
    inp = torch.LongTensor(batch_size, chunk_len)
    target = torch.LongTensor(batch_size, chunk_len)
    for bi in range(batch_size):
        chunk = chunks[bi]
        inp[bi] = char_tensor(chunk[:-1])
        target[bi] = char_tensor(chunk[1:])
    inp = Variable(inp)
    target = Variable(target)
    return inp, target


def train(decoder, decoder_optimizer, criterion, inp, target, chunk_len, batch_size):
    hidden = decoder.init_hidden(batch_size)
    decoder.zero_grad()
    loss = 0

    for c in range(chunk_len):
        output, hidden = decoder(inp[:,c], hidden)
        loss += criterion(output.view(batch_size, -1), target[:,c])

    loss.backward()
    decoder_optimizer.step()

    return loss.data.item() / chunk_len


def generate(decoder, prime_str='A', predict_len=10, temperature=0.8):
    hidden = decoder.init_hidden(1)
    prime_input = Variable(char_tensor(prime_str).unsqueeze(0))
    predicted = prime_str

    # Use priming string to "build up" hidden state
    for p in range(len(prime_str) - 1):
        _, hidden = decoder(prime_input[:,p], hidden)

    inp = prime_input[:,-1]

    for p in range(predict_len):
        output, hidden = decoder(inp, hidden)

        # Sample from the network as a multinomial distribution
        output_dist = output.data.view(-1).div(temperature).exp()
        top_i = torch.multinomial(output_dist, 1)[0]

        # Add predicted character to string and use as next input
        predicted_char = all_characters[top_i]
        predicted += predicted_char
        inp = Variable(char_tensor(predicted_char).unsqueeze(0))

    return predicted


CHUNK_LEN = 6


def corpus_model():
    return CharRNN(n_characters, 12, n_characters, model="gru", n_layers=2)


def corpus_batch(rng):
    text = "the quick brown fox jumps over the lazy dog; THE QUICK BROWN FOX!"
    starts = rng.integers(0, len(text) - CHUNK_LEN - 1, 3)
    return [text[s:s + CHUNK_LEN + 1] for s in starts]


def corpus_loss(decoder, chunks):
    inp, target = random_training_set(chunks, CHUNK_LEN, len(chunks))
    criterion = nn.CrossEntropyLoss()
    hidden = decoder.init_hidden(len(chunks))
    loss = 0
    for c in range(CHUNK_LEN):
        output, hidden = decoder(inp[:, c], hidden)
        loss += criterion(output.view(len(chunks), -1), target[:, c])
    return loss


def corpus_train(decoder, chunks):
    decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    losses = []
    for epoch in range(1, 3):
        inp, target = random_training_set(chunks, CHUNK_LEN, len(chunks))
        losses.append(train(decoder, decoder_optimizer, criterion, inp, target, CHUNK_LEN, len(chunks)))
    return losses


def corpus_eval(decoder, chunks):
    return generate(decoder, 'Th', 8, temperature=0.8)
