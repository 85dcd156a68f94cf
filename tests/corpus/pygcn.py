"""Graph convolutional network in the style of tkipf/pygcn (layers.py, models.py, utils.py, train.py)."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parameter import Parameter
from torch.nn.modules.module import Module


class GraphConvolution(Module):
    """
    Simple GCN layer, similar to https://arxiv.org/abs/1609.02907
    """

    def __init__(self, in_features, out_features, bias=True):
        super(GraphConvolution, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        if bias:
            self.bias = Parameter(torch.FloatTensor(out_features))
        else:
            self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = torch.spmm(adj, support)
        if self.bias is not None:
            return output + self.bias
        else:
            return output

    def __repr__(self):
        return self.__class__.__name__ + ' (' \
               + str(self.in_features) + ' -> ' \
               + str(self.out_features) + ')'


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout):
        super(GCN, self).__init__()

        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, adj)
        return F.log_softmax(x, dim=1)


def encode_onehot(labels):
    classes = set(labels)
    classes_dict = {c: np.identity(len(classes))[i, :] for i, c in
                    enumerate(sorted(classes))}
    labels_onehot = np.array(list(map(classes_dict.get, labels)),
                             dtype=np.int32)
    return labels_onehot


def normalize(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = np.diag(r_inv)  # the original uses scipy.sparse.diags; dense here (no scipy in the tests)
    mx = r_mat_inv.dot(mx)
    return mx


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a (dense stand-in for a scipy) sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.astype(np.float32)
    row, col = np.nonzero(sparse_mx)
    indices = torch.from_numpy(
        np.vstack((row, col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx[row, col])
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse.FloatTensor(indices, values, shape)


def load_data(rng, n=12):
    labels_raw = [["a", "b", "c"][i] for i in rng.integers(0, 3, n)]
    features = (rng.uniform(0, 1, (n, 6)) * (rng.uniform(0, 1, (n, 6)) > 0.4)).astype(np.float32)
    labels = encode_onehot(labels_raw)
    edges = rng.integers(0, n, (20, 2))
    adj = np.zeros((labels.shape[0], labels.shape[0]), dtype=np.float32)
    np.add.at(adj, (edges[:, 0], edges[:, 1]), 1.0)
    # build symmetric adjacency matrix
    adj = adj + adj.T * (adj.T > adj) - adj * (adj.T > adj)
    features = normalize(features)
    adj = normalize(adj + np.eye(adj.shape[0], dtype=np.float32))
    idx_train = range(6)
    idx_val = range(6, 9)
    idx_test = range(9, 12)
    features = torch.FloatTensor(np.array(features))
    labels = torch.LongTensor(np.where(labels)[1])
    adj = sparse_mx_to_torch_sparse_tensor(adj)
    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)
    return adj, features, labels, idx_train, idx_val, idx_test


CORPUS_FLOAT64 = False


def corpus_model():
    return GCN(nfeat=6, nhid=8, nclass=3, dropout=0.5)


def corpus_batch(rng):
    return load_data(rng)


def corpus_loss(model, batch):
    adj, features, labels, idx_train, idx_val, idx_test = batch
    output = model(features, adj)
    return F.nll_loss(output[idx_train], labels[idx_train])


def corpus_train(model, batch):
    adj, features, labels, idx_train, idx_val, idx_test = batch
    optimizer = optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    history = []
    for epoch in range(3):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        acc_train = accuracy(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        model.eval()
        output = model(features, adj)
        loss_val = F.nll_loss(output[idx_val], labels[idx_val])
        acc_val = accuracy(output[idx_val], labels[idx_val])
        history.append((loss_train.item(), acc_train.item(), loss_val.item(), acc_val.item()))
    return history


def corpus_eval(model, batch):
    adj, features, labels, idx_train, idx_val, idx_test = batch
    model.eval()
    output = model(features, adj)
    loss_test = F.nll_loss(output[idx_test], labels[idx_test])
    acc_test = accuracy(output[idx_test], labels[idx_test])
    dense = torch.sparse.mm(adj, features)
    return loss_test, acc_test, repr(model.gc1), dense
