"""The delta rule (DeltaNet): forward and backward kernels, and the autograd function."""
