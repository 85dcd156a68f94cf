"""Seq2seq translation with Bahdanau attention, in the style of the PyTorch "NLP from scratch" tutorial."""
import random

import numpy as np
import torch
import torch.nn as nn
from torch import optim
import torch.nn.functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SOS_token = 0
EOS_token = 1
MAX_LENGTH = 5


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size

        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super(BahdanauAttention, self).__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)

        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)

        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super(AttnDecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long, device=device).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        attentions = []

        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs
            )
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)

            if target_tensor is not None:
                # Teacher forcing: Feed the target as the next input
                decoder_input = target_tensor[:, i].unsqueeze(1) # Teacher forcing
            else:
                # Without teacher forcing: use its own predictions as the next input
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()  # detach from history as input

        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)

        return decoder_outputs, decoder_hidden, attentions

    def forward_step(self, input, hidden, encoder_outputs):
        embedded =  self.dropout(self.embedding(input))

        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)

        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)

        return output, hidden, attn_weights


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = EncoderRNN(11, 8).to(device)
        self.decoder = AttnDecoderRNN(8, 9).to(device)


def train_epoch(dataloader, encoder, decoder, encoder_optimizer,
          decoder_optimizer, criterion):

    total_loss = 0
    for data in dataloader:
        input_tensor, target_tensor = data

        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()

        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)

        loss = criterion(
            decoder_outputs.view(-1, decoder_outputs.size(-1)),
            target_tensor.view(-1)
        )
        loss.backward()

        encoder_optimizer.step()
        decoder_optimizer.step()

        total_loss += loss.item()

    return total_loss / len(dataloader)


# softmax ignores the score's bias: its gradient is zero up to rounding, which Adam turns into
# steps of +-lr, so after training Va.bias agrees only to lr
CORPUS_TOLERANCE = {"train": {"float32": (2e-4, 2e-3), "float64": (1e-6, 2e-3)}}


def corpus_model():
    return Seq2Seq()


def corpus_batch(rng):
    input_ids = np.zeros((3, MAX_LENGTH), dtype=np.int32)
    target_ids = np.zeros((3, MAX_LENGTH), dtype=np.int32)
    for idx in range(3):
        inp_ids = list(rng.integers(2, 11, rng.integers(2, 4)))
        tgt_ids = list(rng.integers(2, 9, rng.integers(2, 4)))
        inp_ids.append(EOS_token)
        tgt_ids.append(EOS_token)
        input_ids[idx, :len(inp_ids)] = inp_ids
        target_ids[idx, :len(tgt_ids)] = tgt_ids
    return (torch.LongTensor(input_ids).to(device), torch.LongTensor(target_ids).to(device))


def corpus_loss(model, batch):
    input_tensor, target_tensor = batch
    encoder_outputs, encoder_hidden = model.encoder(input_tensor)
    decoder_outputs, _, _ = model.decoder(encoder_outputs, encoder_hidden, target_tensor)
    return nn.NLLLoss()(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))


def corpus_train(model, batch):
    encoder_optimizer = optim.Adam(model.encoder.parameters(), lr=0.001)
    decoder_optimizer = optim.Adam(model.decoder.parameters(), lr=0.001)
    criterion = nn.NLLLoss()
    return [train_epoch([batch, batch], model.encoder, model.decoder, encoder_optimizer, decoder_optimizer, criterion)
            for epoch in range(2)]


def corpus_eval(model, batch):
    with torch.no_grad():
        encoder_outputs, encoder_hidden = model.encoder(batch[0])
        decoder_outputs, decoder_hidden, decoder_attn = model.decoder(encoder_outputs, encoder_hidden)
        _, topi = decoder_outputs.topk(1)
        decoded_ids = topi.squeeze()
    words = []
    for idx in decoded_ids[0]:
        if idx.item() == EOS_token:
            words.append('<EOS>')
            break
        words.append(str(idx.item()))
    return decoded_ids, decoder_attn, words
