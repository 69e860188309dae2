"""What studies the kernels rather than running them: the compile check (`compile`), the launch
recorder it uses (`launches`), the interpreter's memory tracer (`trace`) and the cost model
(`cost_model`). The GPU tile sweep, a benchmark, is `linattn_core.bench.tile_sweep`."""
