"""Wasserstein GAN with weight clipping, in the style of martinarjovsky/WassersteinGAN (models/mlp.py,
main.py): MLP generator and critic, RMSprop, p.data.clamp_, backward(one) / backward(mone)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.parallel
import torch.optim as optim
from torch.autograd import Variable


class MLP_G(nn.Module):
    def __init__(self, isize, nz, nc, ngf, ngpu):
        super(MLP_G, self).__init__()
        self.ngpu = ngpu

        main = nn.Sequential(
            # Z goes into a linear of size: ngf
            nn.Linear(nz, ngf),
            nn.ReLU(True),
            nn.Linear(ngf, ngf),
            nn.ReLU(True),
            nn.Linear(ngf, ngf),
            nn.ReLU(True),
            nn.Linear(ngf, nc * isize * isize),
        )
        self.main = main
        self.nc = nc
        self.isize = isize
        self.nz = nz

    def forward(self, input):
        input = input.view(input.size(0), input.size(1))
        if isinstance(input.data, torch.cuda.FloatTensor) and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output.view(output.size(0), self.nc, self.isize, self.isize)


class MLP_D(nn.Module):
    def __init__(self, isize, nz, nc, ndf, ngpu):
        super(MLP_D, self).__init__()
        self.ngpu = ngpu

        main = nn.Sequential(
            # Z goes into a linear of size: ndf
            nn.Linear(nc * isize * isize, ndf),
            nn.ReLU(True),
            nn.Linear(ndf, ndf),
            nn.ReLU(True),
            nn.Linear(ndf, ndf),
            nn.ReLU(True),
            nn.Linear(ndf, 1),
        )
        self.main = main
        self.nc = nc
        self.isize = isize
        self.nz = nz

    def forward(self, input):
        input = input.view(input.size(0),
                           input.size(1) * input.size(2) * input.size(3))
        if isinstance(input.data, torch.cuda.FloatTensor) and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        output = output.mean(0)
        return output.view(1)


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class opt:
    batchSize, imageSize, nz, nc, ngf, ndf = 3, 4, 5, 1, 8, 8
    clamp_lower, clamp_upper = -0.05, 0.05
    lrD = lrG = 0.00005
    Diters = 2


CORPUS_FLOAT64 = False


def corpus_model():
    netG = MLP_G(opt.imageSize, opt.nz, opt.nc, opt.ngf, 1)
    netG.apply(weights_init)
    netD = MLP_D(opt.imageSize, opt.nz, opt.nc, opt.ndf, 1)
    return {"netG": netG, "netD": netD}


def corpus_batch(rng):
    return torch.from_numpy(rng.uniform(-1, 1, (3, opt.batchSize, opt.nc, opt.imageSize, opt.imageSize))
                            .astype(np.float32))


def corpus_loss(nets, data):
    netD, netG = nets["netD"], nets["netG"]
    noise = torch.FloatTensor(opt.batchSize, opt.nz, 1, 1).normal_(0, 1)
    fake = netG(Variable(noise))
    return netD(Variable(data[0])) - netD(fake)


def corpus_train(nets, data):
    netD, netG = nets["netD"], nets["netG"]
    input = torch.FloatTensor(opt.batchSize, 3, opt.imageSize, opt.imageSize)
    noise = torch.FloatTensor(opt.batchSize, opt.nz, 1, 1)
    fixed_noise = torch.FloatTensor(opt.batchSize, opt.nz, 1, 1).normal_(0, 1)
    one = torch.FloatTensor([1])
    mone = one * -1
    optimizerD = optim.RMSprop(netD.parameters(), lr = opt.lrD)
    optimizerG = optim.RMSprop(netG.parameters(), lr = opt.lrG)
    history = []
    data_iter = iter(data)
    i = 0
    gen_iterations = 0
    while i < len(data):
        ############################
        # (1) Update D network
        ###########################
        for p in netD.parameters(): # reset requires_grad
            p.requires_grad = True # they are set to False below in netG update

        j = 0
        while j < opt.Diters and i < len(data):
            j += 1

            # clamp parameters to a cube
            for p in netD.parameters():
                p.data.clamp_(opt.clamp_lower, opt.clamp_upper)

            real_cpu = next(data_iter)
            i += 1

            # train with real
            netD.zero_grad()
            batch_size = real_cpu.size(0)

            input.resize_as_(real_cpu).copy_(real_cpu)
            inputv = Variable(input)

            errD_real = netD(inputv)
            errD_real.backward(one)

            # train with fake
            noise.resize_(opt.batchSize, opt.nz, 1, 1).normal_(0, 1)
            noisev = Variable(noise, volatile = True) # totally freeze netG
            fake = Variable(netG(noisev).data)
            inputv = fake
            errD_fake = netD(inputv)
            errD_fake.backward(mone)
            errD = errD_real - errD_fake
            optimizerD.step()

        ############################
        # (2) Update G network
        ###########################
        for p in netD.parameters():
            p.requires_grad = False # to avoid computation
        netG.zero_grad()
        # in case our last batch was the tail batch of the dataloader,
        # make sure we feed a full batch of noise
        noise.resize_(opt.batchSize, opt.nz, 1, 1).normal_(0, 1)
        noisev = Variable(noise)
        fake = netG(noisev)
        errG = netD(fake)
        errG.backward(one)
        optimizerG.step()
        gen_iterations += 1
        history.append((errD.data[0].item(), errG.data[0].item(), errD_real.data[0].item(),
                        errD_fake.data[0].item()))
    fake = netG(Variable(fixed_noise))
    fake.data = fake.data.mul(0.5).add(0.5)
    return history, fake.data
