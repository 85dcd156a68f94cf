"""Text classification with nn.EmbeddingBag, in the style of the PyTorch "Text classification with
the torchtext library" tutorial (collate_batch with offsets, SGD, StepLR, clip_grad_norm_)."""
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
text_pipeline = lambda x: [ord(c) % 20 for c in x.split()[0]] + [len(w) % 20 for w in x.split()]
label_pipeline = lambda x: int(x) - 1


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(label_pipeline(_label))
        processed_text = torch.tensor(text_pipeline(_text), dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list.to(device), text_list.to(device), offsets.to(device)


criterion = torch.nn.CrossEntropyLoss()


def corpus_model():
    return TextClassificationModel(20, 8, 4)


def corpus_batch(rng):
    words = ["stocks", "rally", "team", "wins", "final", "new", "chip", "launch", "rain", "storm", "a"]
    return [(str(rng.integers(1, 5)), " ".join(rng.choice(words, rng.integers(2, 6)))) for _ in range(6)]


def corpus_loss(model, data):
    label, text, offsets = collate_batch(data)
    return criterion(model(text, offsets), label)


def corpus_train(model, data):
    optimizer = torch.optim.SGD(model.parameters(), lr=5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
    dataloader = DataLoader(data, batch_size=3, shuffle=False, collate_fn=collate_batch)
    model.train()
    total_acc, total_count = 0, 0
    history = []
    for epoch in range(2):
        for idx, (label, text, offsets) in enumerate(dataloader):
            optimizer.zero_grad()
            predicted_label = model(text, offsets)
            loss = criterion(predicted_label, label)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)
            history.append(loss.item())
        scheduler.step()
    return history, total_acc / total_count


def corpus_eval(model, data):
    model.eval()
    with torch.no_grad():
        label, text, offsets = collate_batch(data)
        output = model(text, offsets)
        bag_sum = nn.EmbeddingBag.from_pretrained(model.embedding.weight, mode="sum", padding_idx=0)
        bag_max = nn.EmbeddingBag.from_pretrained(model.embedding.weight, mode="max")
        fixed = text[:6].view(2, 3)
    return output.argmax(1), bag_sum(text, offsets), bag_max(fixed), repr(bag_sum)
