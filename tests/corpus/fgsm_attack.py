"""Adversarial examples with FGSM, in the style of the PyTorch "Adversarial example generation" tutorial."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# LeNet Model definition
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(8 * 6 * 6, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


# FGSM attack code
def fgsm_attack(image, epsilon, data_grad):
    # Collect the element-wise sign of the data gradient
    sign_data_grad = data_grad.sign()
    # Create the perturbed image by adjusting each pixel of the input image
    perturbed_image = image + epsilon*sign_data_grad
    # Adding clipping to maintain [0,1] range
    perturbed_image = torch.clamp(perturbed_image, 0, 1)
    # Return the perturbed image
    return perturbed_image


# restores the tensors to their original scale
def denorm(batch, mean=[0.1307], std=[0.3081]):
    if isinstance(mean, list):
        mean = torch.tensor(mean).to(batch.device)
    if isinstance(std, list):
        std = torch.tensor(std).to(batch.device)

    return batch * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)


def test(model, device, test_loader, epsilon):
    # Accuracy counter
    correct = 0
    adv_examples = []

    # Loop over all examples in test set
    for data, target in test_loader:

        # Send the data and label to the device
        data, target = data.to(device), target.to(device)

        # Set requires_grad attribute of tensor. Important for Attack
        data.requires_grad = True

        # Forward pass the data through the model
        output = model(data)
        init_pred = output.max(1, keepdim=True)[1] # get the index of the max log-probability

        # Calculate the loss
        loss = F.nll_loss(output, target)

        # Zero all existing gradients
        model.zero_grad()

        # Calculate gradients of model in backward pass
        loss.backward()

        # Collect ``datagrad``
        data_grad = data.grad.data

        # Restore the data to its original scale
        data_denorm = denorm(data)

        # Call FGSM Attack
        perturbed_data = fgsm_attack(data_denorm, epsilon, data_grad)

        # Reapply normalization
        perturbed_data_normalized = (perturbed_data - 0.1307) / 0.3081

        # Re-classify the perturbed image
        output = model(perturbed_data_normalized)

        # Check for success
        final_pred = output.max(1, keepdim=True)[1] # get the index of the max log-probability
        if final_pred.item() == target.item():
            correct += 1
        adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
        adv_examples.append( (init_pred.item(), final_pred.item(), float(adv_ex.sum())) )

    # Calculate final accuracy for this epsilon
    final_acc = correct/float(len(test_loader))
    return final_acc, adv_examples


CORPUS_TRAIN_MODE = False
device = torch.device("cpu")


def corpus_model():
    model = Net().to(device)
    # Set the model in evaluation mode. In this case this is for the Dropout layers
    model.eval()
    return model


def corpus_batch(rng):
    return [(torch.tensor(rng.uniform(-0.4, 2.8, (1, 1, 16, 16)), dtype=torch.get_default_dtype()),
             torch.tensor([int(rng.integers(0, 10))])) for _ in range(3)]


def corpus_loss(model, loader):
    data, target = loader[0]
    data.requires_grad = True
    loss = F.nll_loss(model(data), target)
    data_grad, = torch.autograd.grad(loss, data, retain_graph=True)
    perturbed = fgsm_attack(denorm(data), 0.1, data_grad)
    return loss + F.nll_loss(model((perturbed - 0.1307) / 0.3081), target)


def corpus_train(model, loader):
    return [test(model, device, loader, eps) for eps in [0, .05, .3]]
