"""Character-level name models in the style of karpathy's makemore / "Neural Networks: Zero to Hero"
notebooks: a counting bigram model, a one-hot neural bigram, and the hand-written layer classes
(Linear, BatchNorm1d, Tanh, Embedding, FlattenConsecutive, Sequential) trained with p.data updates,
all seeded through torch.Generator().manual_seed(2147483647)."""
import numpy as np
import torch
import torch.nn.functional as F

words = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "charlotte", "amelia", "harper", "evelyn"]
chars = sorted(list(set(''.join(words))))
stoi = {s:i+1 for i,s in enumerate(chars)}
stoi['.'] = 0
itos = {i:s for s,i in stoi.items()}
vocab_size = len(itos)
block_size = 4


def build_dataset(words):
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + '.':
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix] # crop and append
    X = torch.tensor(X)
    Y = torch.tensor(Y)
    return X, Y


g = torch.Generator().manual_seed(2147483647) # for reproducibility


class Linear:

    def __init__(self, fan_in, fan_out, bias=True):
        self.weight = torch.randn((fan_in, fan_out), generator=g) / fan_in**0.5 # note: kaiming init
        self.bias = torch.zeros(fan_out) if bias else None

    def __call__(self, x):
        self.out = x @ self.weight
        if self.bias is not None:
            self.out += self.bias
        return self.out

    def parameters(self):
        return [self.weight] + ([] if self.bias is None else [self.bias])


class BatchNorm1d:

    def __init__(self, dim, eps=1e-5, momentum=0.1):
        self.eps = eps
        self.momentum = momentum
        self.training = True
        # parameters (trained with backprop)
        self.gamma = torch.ones(dim)
        self.beta = torch.zeros(dim)
        # buffers (trained with a running 'momentum update')
        self.running_mean = torch.zeros(dim)
        self.running_var = torch.ones(dim)

    def __call__(self, x):
        # calculate the forward pass
        if self.training:
            if x.ndim == 2:
                dim = 0
            elif x.ndim == 3:
                dim = (0,1)
            xmean = x.mean(dim, keepdim=True) # batch mean
            xvar = x.var(dim, keepdim=True) # batch variance
        else:
            xmean = self.running_mean
            xvar = self.running_var
        xhat = (x - xmean) / torch.sqrt(xvar + self.eps) # normalize to unit variance
        self.out = self.gamma * xhat + self.beta
        # update the buffers
        if self.training:
            with torch.no_grad():
                self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean
                self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar
        return self.out

    def parameters(self):
        return [self.gamma, self.beta]


class Tanh:
    def __call__(self, x):
        self.out = torch.tanh(x)
        return self.out
    def parameters(self):
        return []


class Embedding:

    def __init__(self, num_embeddings, embedding_dim):
        self.weight = torch.randn((num_embeddings, embedding_dim), generator=g)

    def __call__(self, IX):
        self.out = self.weight[IX]
        return self.out

    def parameters(self):
        return [self.weight]


class FlattenConsecutive:

    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        B, T, C = x.shape
        x = x.view(B, T//self.n, C*self.n)
        if x.shape[1] == 1:
            x = x.squeeze(1)
        self.out = x
        return self.out

    def parameters(self):
        return []


class Sequential:

    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        self.out = x
        return self.out

    def parameters(self):
        # get parameters of all layers and stretch them out into one list
        return [p for layer in self.layers for p in layer.parameters()]


# the one-hot bigram multiplies float32 encodings with a default-dtype W, as the notebook does
CORPUS_FLOAT64 = False
n_embd = 6 # the dimensionality of the character embedding vectors
n_hidden = 12 # the number of neurons in the hidden layer of the MLP


def corpus_model():
    g.manual_seed(2147483647)
    model = Sequential([
        Embedding(vocab_size, n_embd),
        FlattenConsecutive(2), Linear(n_embd * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        FlattenConsecutive(2), Linear(n_hidden*2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        Linear(n_hidden, vocab_size),
    ])
    # parameter init
    with torch.no_grad():
        model.layers[-1].weight *= 0.1 # last layer make less confident
    parameters = model.parameters()
    for p in parameters:
        p.requires_grad = True
    return model


def corpus_batch(rng):
    return build_dataset(words)


def corpus_loss(model, batch):
    Xtr, Ytr = batch
    ix = torch.randint(0, Xtr.shape[0], (8,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y
    for layer in model.layers:
        layer.out.retain_grad() if hasattr(layer, 'out') and layer.out.requires_grad else None
    logits = model(Xb)
    return F.cross_entropy(logits, Yb) # loss function


def corpus_train(model, batch):
    Xtr, Ytr = batch
    max_steps = 3
    batch_size = 8
    lossi = []
    parameters = model.parameters()
    for i in range(max_steps):
        # minibatch construct
        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
        Xb, Yb = Xtr[ix], Ytr[ix] # batch X,Y

        # forward pass
        logits = model(Xb)
        loss = F.cross_entropy(logits, Yb) # loss function

        # backward pass
        for layer in model.layers:
            if hasattr(layer, 'out') and not isinstance(layer, FlattenConsecutive):
                layer.out.retain_grad() # AFTER_DEBUG: would take out retain_graph
        for p in parameters:
            p.grad = None
        loss.backward()

        # update: simple SGD
        lr = 0.1 if i < 150000 else 0.01 # step learning rate decay
        for p in parameters:
            p.data += -lr * p.grad

        lossi.append(loss.log10().item())
    saturated = [(layer.out.abs() > 0.97).float().mean().item() for layer in model.layers if isinstance(layer, Tanh)]
    grads = [layer.out.grad.std().item() for layer in model.layers if isinstance(layer, Tanh)]
    bn = model.layers[3]
    return lossi, saturated, grads, bn.running_mean, bn.running_var


def corpus_eval(model, batch):
    # put layers into eval mode (needed for batchnorm especially)
    for layer in model.layers:
        layer.training = False
    names = []
    for _ in range(3):
        out = []
        context = [0] * block_size # initialize with all ...
        for _ in range(8):
            # forward pass the neural net
            logits = model(torch.tensor([context]))
            probs = F.softmax(logits, dim=1)
            # sample from the distribution
            ix = torch.multinomial(probs, num_samples=1, generator=g).item()
            # shift the context window and track the samples
            context = context[1:] + [ix]
            out.append(ix)
            # if we sample the special '.' token, break
            if ix == 0:
                break
        names.append(''.join(itos[i] for i in out)) # decode and print the generated word

    # the counting bigram model and the one-hot neural bigram
    N = torch.zeros((vocab_size, vocab_size), dtype=torch.int32)
    for w in words:
        chs = ['.'] + list(w) + ['.']
        for ch1, ch2 in zip(chs, chs[1:]):
            N[stoi[ch1], stoi[ch2]] += 1
    P = (N+1).float()
    P /= P.sum(1, keepdims=True)
    ix = 0
    sampled = []
    while True:
        p = P[ix]
        ix = torch.multinomial(p, num_samples=1, replacement=True, generator=g).item()
        sampled.append(itos[ix])
        if ix == 0 or len(sampled) > 10:
            break
    xs, ys = [], []
    for w in words:
        chs = ['.'] + list(w) + ['.']
        for ch1, ch2 in zip(chs, chs[1:]):
            xs.append(stoi[ch1])
            ys.append(stoi[ch2])
    xs = torch.tensor(xs)
    ys = torch.tensor(ys)
    num = xs.nelement()
    W = torch.randn((vocab_size, vocab_size), generator=g, requires_grad=True)
    for k in range(3):
        xenc = F.one_hot(xs, num_classes=vocab_size).float() # input to the network: one-hot encoding
        logits = xenc @ W # predict log-counts
        counts = logits.exp() # counts, equivalent to N
        probs = counts / counts.sum(1, keepdims=True) # probabilities for next character
        loss = -probs[torch.arange(num), ys].log().mean() + 0.01*(W**2).mean()
        W.grad = None # set to zero the gradient
        loss.backward()
        W.data += -50 * W.grad
    return names, ''.join(sampled), loss.item(), W
