"""Run one function in a new Python process and return its JSON result: for measurements that
must not see what this process has cached or allocated (peak memory, a first call's time).

    run_fresh(function, env=..., **kwargs)  # here
    python -m linattn_core.bench.fresh module:function '{"kwarg": ...}'  # what runs there

The function is found by its import path, so it must be defined at the top level of an
importable module; its keyword arguments and its return value travel as JSON.
"""

import importlib
import json
import subprocess
import sys


def run_fresh(function, *, env=None, cwd=None, timeout=None, **kwargs):
    """function(**kwargs) in a new process (environment `env`, working directory `cwd`): its
    return value, or RuntimeError with the child's error output."""
    target = f"{function.__module__}:{function.__qualname__}"
    done = subprocess.run(
        [sys.executable, "-m", "linattn_core.bench.fresh", target, json.dumps(kwargs)],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"run_fresh: {target}(**{kwargs}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv=None):
    target, kwargs = sys.argv[1:] if argv is None else argv
    module, name = target.split(":")
    function = getattr(importlib.import_module(module), name)
    print(json.dumps(function(**json.loads(kwargs))), flush=True)


if __name__ == "__main__":
    main()
