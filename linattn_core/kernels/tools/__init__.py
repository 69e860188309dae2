"""What studies the kernels rather than running them: the compile check (`compile`), the launch
recorder it uses (`launches`), the interpreter's memory tracer (`trace`), the cost model
(`cost_model`) and the GPU tile sweep (`sweep`)."""
