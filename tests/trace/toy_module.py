"""A custom nn.Module for `oomless trace --module tests.trace.toy_module:build` (test fixture)."""
import torch


def build():
    # two linears: 256x256 + 256 bias, then 256x10 + 10 bias (fp32)
    return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def step(model, input_shape):
    x = torch.randn(*(input_shape or (32, 256)), device="meta")
    return model(x).float().pow(2).mean()
