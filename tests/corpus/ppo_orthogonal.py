"""A PPO actor-critic in the style of CleanRL / pytorch-a2c-ppo-acktr: orthogonal initialisation
through layer_init (including the deprecated nn.init names old code still calls), a Categorical
policy, clipped surrogate, value clipping, GAE via torch ops and generalised advantage
normalisation with torch.quantile-based clipping."""
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def legacy_init(layer, gain=1.0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        nn.init.orthogonal(layer.weight, gain=gain)
        nn.init.constant(layer.bias, 0)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim=6, n_actions=3):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 16)), nn.Tanh(),
            layer_init(nn.Linear(16, 16)), nn.Tanh(),
            layer_init(nn.Linear(16, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            legacy_init(nn.Linear(obs_dim, 16), gain=np.sqrt(2)), nn.Tanh(),
            layer_init(nn.Linear(16, 16)), nn.Tanh(),
            layer_init(nn.Linear(16, n_actions), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def compute_gae(rewards, values, dones, next_value, gamma=0.99, gae_lambda=0.95):
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(steps)):
        nextnonterminal = 1.0 - dones[t]
        nextvalues = next_value if t == steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def corpus_model():
    return Agent()


def corpus_batch(rng):
    dtype = torch.get_default_dtype()
    obs = torch.tensor(rng.normal(size=(8, 6)), dtype=dtype)
    actions = torch.tensor(rng.integers(0, 3, size=8))
    rewards = torch.tensor(rng.normal(size=8), dtype=dtype)
    dones = torch.tensor((rng.uniform(size=8) < 0.2).astype(np.float64), dtype=dtype)
    return obs, actions, rewards, dones


def ppo_loss(agent, batch, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5):
    obs, actions, rewards, dones = batch
    with torch.no_grad():
        _, old_logprob, _, old_values = agent.get_action_and_value(obs, actions)
        old_values = old_values.flatten()
        advantages, returns = compute_gae(rewards, old_values, dones, agent.get_value(obs[-1:]).flatten()[0])
        low, high = torch.quantile(advantages, torch.tensor([0.05, 0.95], dtype=advantages.dtype))
        advantages = advantages.clamp(low, high)
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, actions)
    ratio = (newlogprob - old_logprob).exp()
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
    newvalue = newvalue.view(-1)
    v_clipped = old_values + torch.clamp(newvalue - old_values, -clip_coef, clip_coef)
    v_loss = 0.5 * torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2).mean()
    return pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef


def corpus_loss(model, batch):
    return ppo_loss(model, batch)


def corpus_train(model, batch):
    optimizer = optim.Adam(model.parameters(), lr=2.5e-4, eps=1e-5)
    losses = []
    for _ in range(3):
        loss = ppo_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        losses.append(loss.item())
    return losses


def corpus_eval(model, batch):
    with torch.no_grad():
        _, logprob, entropy, value = model.get_action_and_value(batch[0], batch[1])
        returns = torch.logcumsumexp(batch[2], dim=0)
    return logprob, entropy, value, returns
