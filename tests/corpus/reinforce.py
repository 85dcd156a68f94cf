"""REINFORCE in the style of pytorch/examples/reinforcement_learning/reinforce.py (a tiny stand-in env)."""
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

gamma = 0.99
eps = np.finfo(np.float32).eps.item()


class LineWorld:
    """CartPole's interface on a 1-D walk: four observations, two actions, reward 1 per step."""

    def __init__(self, start):
        self.start = start

    def reset(self):
        self.position = np.array(self.start, dtype=np.float64)
        return self.position.copy(), {}

    def step(self, action):
        self.position[0] += 0.1 if action == 1 else -0.1
        self.position[1:] = np.tanh(self.position[:-1])
        terminated = abs(self.position[0]) > 0.25
        return self.position.copy(), 1.0, terminated, False, {}


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


def select_action(policy, state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode(policy, optimizer):
    R = 0
    policy_loss = []
    returns = deque()
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]
    return policy_loss.item()


CORPUS_FLOAT64 = False


def corpus_model():
    return Policy()


def corpus_batch(rng):
    return rng.uniform(-0.05, 0.05, 4), rng.integers(0, 2, 5)


def corpus_loss(policy, batch):
    start, actions = batch
    env = LineWorld(start)
    state, _ = env.reset()
    for action in actions:
        probs = policy(torch.from_numpy(state).float().unsqueeze(0))
        m = Categorical(probs)
        policy.saved_log_probs.append(m.log_prob(torch.tensor([int(action)])))
        state, reward, terminated, truncated, _ = env.step(int(action))
        policy.rewards.append(reward)
    R = 0
    returns = deque()
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    loss = torch.cat([-log_prob * R for log_prob, R in zip(policy.saved_log_probs, returns)]).sum()
    del policy.rewards[:]
    del policy.saved_log_probs[:]
    return loss


def corpus_train(policy, batch):
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    running_reward = 10
    history = []
    env = LineWorld(batch[0])
    for i_episode in range(3):
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 10):  # Don't infinite loop while learning
            action = select_action(policy, state)
            state, reward, done, _, _ = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        history.append((finish_episode(policy, optimizer), running_reward))
    return history
