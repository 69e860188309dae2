"""What studies the kernels rather than running them: the launch recorder of the compile check
(`launches`; the check itself is `linattn_core.kernels.compile`), the interpreter's memory
tracer (`trace`), the cost model (`cost_model`) and what the log-gates add to the delta rule's
kernels (`gate_cost`, with the predicted gated times). The GPU tile sweep, a benchmark, is
`linattn_core.bench.tile_sweep`."""
