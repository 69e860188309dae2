"""Causal linear attention: forward and backward kernels, and the autograd function."""
