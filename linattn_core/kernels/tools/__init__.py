"""What studies the kernels rather than running them: the compile check (`compile`), the launch
recorder it uses (`launches`), the interpreter's memory tracer (`trace`) and the cost model
(`costs`)."""
