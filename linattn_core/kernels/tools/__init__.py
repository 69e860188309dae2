"""What studies the kernels rather than running them: the launch recorder of the compile check
(`launches`; the check itself is `linattn_core.kernels.compile`), the interpreter's memory
tracer (`trace`) and the cost model (`cost_model`). The GPU tile sweep, a benchmark, is
`linattn_core.bench.tile_sweep`."""
