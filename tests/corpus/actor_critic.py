"""Actor-critic in the style of pytorch/examples/reinforcement_learning/actor_critic.py."""
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

SavedAction = namedtuple('SavedAction', ['log_prob', 'value'])
gamma = 0.99
eps = np.finfo(np.float32).eps.item()


class Policy(nn.Module):
    """
    implements both actor and critic in one model
    """
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 32)

        # actor's layer
        self.action_head = nn.Linear(32, 2)

        # critic's layer
        self.value_head = nn.Linear(32, 1)

        # action & reward buffer
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        """
        forward of both actor and critic
        """
        x = F.relu(self.affine1(x))

        # actor: choses action to take from state s_t
        # by returning probability of each action
        action_prob = F.softmax(self.action_head(x), dim=-1)

        # critic: evaluates being in the state s_t
        state_values = self.value_head(x)

        # return values for both actor and critic as a tuple of 2 values:
        # 1. a list with the probability of each action over the action space
        # 2. the value from state s_t
        return action_prob, state_values


def select_action(model, state):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)

    # create a categorical distribution over the list of probabilities of actions
    m = Categorical(probs)

    # and sample an action using the distribution
    action = m.sample()

    # save to action buffer
    model.saved_actions.append(SavedAction(m.log_prob(action), state_value))

    # the action to take (left or right)
    return action.item()


def finish_episode(model, optimizer):
    """
    Training code. Calculates actor and critic loss and performs backprop.
    """
    R = 0
    saved_actions = model.saved_actions
    policy_losses = [] # list to save actor (policy) loss
    value_losses = [] # list to save critic (value) loss
    returns = [] # list to save the true values

    # calculate the true value using rewards returned from the environment
    for r in model.rewards[::-1]:
        # calculate the discounted value
        R = r + gamma * R
        returns.insert(0, R)

    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)

    for (log_prob, value), R in zip(saved_actions, returns):
        advantage = R - value.item()

        # calculate actor (policy) loss
        policy_losses.append(-log_prob * advantage)

        # calculate critic (value) loss using L1 smooth loss
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))

    # reset gradients
    optimizer.zero_grad()

    # sum up all the values of policy_losses and value_losses
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()

    # perform backprop
    loss.backward()
    optimizer.step()

    # reset rewards and action buffer
    del model.rewards[:]
    del model.saved_actions[:]
    return loss.item()


CORPUS_FLOAT64 = False


def corpus_model():
    return Policy()


def corpus_batch(rng):
    return rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 2, 6), rng.uniform(0, 1, 6)


def corpus_loss(model, batch):
    states, actions, rewards = batch
    for state, action in zip(states, actions):
        probs, state_value = model(torch.from_numpy(state).float())
        m = Categorical(probs)
        model.saved_actions.append(SavedAction(m.log_prob(torch.tensor(int(action))), state_value))
    model.rewards.extend(float(r) for r in rewards)
    entropy = Categorical(probs=probs).entropy()
    R = 0
    returns = []
    for r in model.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    policy_losses, value_losses = [], []
    for (log_prob, value), R in zip(model.saved_actions, returns):
        advantage = R - value.item()
        policy_losses.append(-log_prob * advantage)
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
    del model.rewards[:]
    del model.saved_actions[:]
    return torch.stack(policy_losses).sum() + torch.stack(value_losses).sum() - 0.01 * entropy


def corpus_train(model, batch):
    states, _, rewards = batch
    optimizer = optim.Adam(model.parameters(), lr=3e-2)
    losses = []
    for i_episode in range(2):
        for state, reward in zip(states, rewards):
            action = select_action(model, state)
            model.rewards.append(float(reward) + action)
        losses.append(finish_episode(model, optimizer))
    return losses
