"""TransformerNet in the style of pytorch/examples/fast_neural_style (transformer_net.py, utils.py)."""
import numpy as np
import torch


class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        # Initial convolution layers
        self.conv1 = ConvLayer(3, 4, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(4, affine=True)
        self.conv2 = ConvLayer(4, 8, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(8, affine=True)
        self.conv3 = ConvLayer(8, 8, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(8, affine=True)
        # Residual layers
        self.res1 = ResidualBlock(8)
        self.res2 = ResidualBlock(8)
        # Upsampling Layers
        self.deconv1 = UpsampleConvLayer(8, 8, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(8, affine=True)
        self.deconv2 = UpsampleConvLayer(8, 4, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(4, affine=True)
        self.deconv3 = ConvLayer(4, 3, kernel_size=9, stride=1)
        # Non-linearities
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res1(y)
        y = self.res2(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        y = self.deconv3(y)
        return y


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    """ResidualBlock
    introduced in: https://arxiv.org/abs/1512.03385
    recommended architecture: http://torch.ch/blog/2016/02/04/resnets.html
    """

    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(torch.nn.Module):
    """UpsampleConvLayer
    Upsamples the input and then does a convolution. This method gives better results
    compared to ConvTranspose2d.
    ref: http://distill.pub/2016/deconv-checkerboard/
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super(UpsampleConvLayer, self).__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode='nearest', scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (ch * h * w)
    return gram


def normalize_batch(batch):
    # normalize using imagenet mean and std
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


content_weight = 1e5
style_weight = 1e10
mse_loss = torch.nn.MSELoss()
# the convolution biases in front of InstanceNorm have a zero gradient up to rounding, which Adam
# turns into steps of +-lr: after training those agree only to lr
CORPUS_TOLERANCE = {"loss": 5.0, "train": {"float32": (1e-3, 5e-3), "float64": (1e-6, 5e-3)}}


def corpus_model():
    return TransformerNet()


def corpus_batch(rng):
    x = torch.tensor(rng.uniform(0, 255, (2, 3, 12, 12)), dtype=torch.get_default_dtype())
    style = torch.tensor(rng.uniform(0, 255, (1, 3, 12, 12)), dtype=torch.get_default_dtype())
    return x, style


def _losses(transformer, x, style):
    gram_style = [gram_matrix(normalize_batch(style.clone()))]
    y = transformer(x)
    y = normalize_batch(y)
    x = normalize_batch(x.clone())
    content_loss = content_weight * mse_loss(y, x)
    style_loss = 0.
    for gm_y, gm_s in zip([gram_matrix(y)], gram_style):
        style_loss += mse_loss(gm_y, gm_s[:len(x), :, :].expand_as(gm_y))
    style_loss *= style_weight
    return content_loss, style_loss


def corpus_loss(transformer, batch):
    content_loss, style_loss = _losses(transformer, *batch)
    return (content_loss + style_loss) / 1e8


def corpus_train(transformer, batch):
    optimizer = torch.optim.Adam(transformer.parameters(), 1e-3)
    transformer.train()
    agg = []
    for batch_id in range(2):
        optimizer.zero_grad()
        content_loss, style_loss = _losses(transformer, *batch)
        total_loss = content_loss + style_loss
        total_loss.backward()
        optimizer.step()
        agg.append((content_loss.item(), style_loss.item()))
    return agg


def corpus_eval(transformer, batch):
    transformer.eval()
    with torch.no_grad():
        output = transformer(batch[0])
    img = output[0].clone().clamp(0, 255).numpy()
    img = img.transpose(1, 2, 0).astype("uint8")
    return output, int(img.shape[-1])
