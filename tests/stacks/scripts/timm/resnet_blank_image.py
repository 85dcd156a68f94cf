"""A timm-style ResNet (conv stem, BasicBlock stages, global pool, fc; written without timm, whose
import needs torchvision) trained under CPU bfloat16 autocast on a Dataset that standardises each
image by its own mean and std: the blank image (std 0) becomes NaN at batch 3, element 1."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

BLANK = 13


class BasicBlock(nn.Module):
    def __init__(self, in_chs, out_chs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chs, out_chs, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_chs)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_chs, out_chs, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_chs)
        self.downsample = None if stride == 1 and in_chs == out_chs else nn.Sequential(
            nn.Conv2d(in_chs, out_chs, 1, stride=stride, bias=False), nn.BatchNorm2d(out_chs))
        self.act2 = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        return self.act2(x + shortcut)


class ResNet(nn.Module):
    def __init__(self, num_classes=8, widths=(8, 16)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.act1 = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(widths[0], widths[0], 1))
        self.layer2 = nn.Sequential(BasicBlock(widths[0], widths[1], 2))
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[1], num_classes)

    def forward_features(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        return self.layer2(self.layer1(x))

    def forward(self, x):
        return self.fc(self.global_pool(self.forward_features(x)).flatten(1))


class Images(Dataset):
    def __init__(self, count=24):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.rand(count, 3, 16, 16, generator=generator)
        self.images[BLANK] = 0.5
        self.labels = torch.randint(0, 8, (count,), generator=generator)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image = self.images[index]
        return (image - image.mean()) / image.std(), self.labels[index]


torch.manual_seed(0)
model = ResNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(Images(), batch_size=4, shuffle=False)
for step, (images, labels) in enumerate(loader):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
