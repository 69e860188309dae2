"""The memory guard, and the peak memory of one attention call measured honestly: one probe per
device (`memory_probe`).

The guard (`skip_reason`) compares an estimate, with a margin, against a budget (by default half
the memory available now, `memory_budget`) and a time estimate against a limit: the benchmarks
and the explorers run a point only when it says nothing.

CUDA: `torch.cuda.max_memory_allocated` after a reset, minus what was allocated before the call
(`cuda_peak_bytes`).

CPU: a fresh process per point, so that nothing cached by an earlier call hides the memory of
this one (forked from an idle helper that has only imported torch, see `CpuMemoryProbe`). The
process creates the inputs, runs the method once at N = 256 (thread pools and library buffers
are set up on a first call, once per process), resets the kernel's high-water mark of its
resident memory (writing 5 to /proc/self/clear_refs resets VmHWM), runs the call and reports
VmHWM minus the resident memory just before the call. glibc's malloc runs with a fixed mmap
threshold (MALLOC_MMAP_THRESHOLD_=65536): every block over 64 KiB is mapped on allocation and
unmapped on free, so resident memory follows the live tensors and the peak is the call's own.
Where clear_refs is not writable the process falls back to ru_maxrss (peak since start) minus
the resident memory before the call, which is exact once the call's peak exceeds the import's.
"""

import json
import os
import resource
import subprocess
import sys

import torch

MMAP_THRESHOLD = 65536
SAFETY = 1.5  # the guard's margin over an estimate (allocator rounding, temporaries)
WARMUP_N = 256  # a first call this long pays one-time costs (thread pools, library buffers)


def make_inputs(n, d, *, dtype=torch.float32, device="cpu", seed=0):
    """q, k, v `(1, 1, n, d)` uniform in [0, 1): valid features for every method."""
    generator = torch.Generator(device=device).manual_seed(seed)
    return tuple(
        torch.rand(1, 1, n, d, generator=generator, device=device).to(dtype) for _ in range(3)
    )


def memory_budget(device):
    """Half the memory available now: MemAvailable of /proc/meminfo, or free CUDA memory."""
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free // 2
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 // 2
    raise RuntimeError("memory_budget: /proc/meminfo has no MemAvailable line")


def skip_reason(needed_bytes, budget, *, seconds=None, max_seconds=None):
    """The guard: why a point must not run, or None when it fits.

    Args:
        needed_bytes: estimated peak memory of the point; the guard adds a margin of 1.5.
        budget: bytes the point may use.
        seconds, max_seconds: estimated time of the point and its limit (None: no time guard).

    >>> skip_reason(10**9, 2 * 10**9) is None
    True
    >>> skip_reason(2 * 10**9, 2 * 10**9)
    'needs ~3 GB > budget 2 GB'
    >>> skip_reason(10**6, 10**9, seconds=40.0, max_seconds=30)
    'needs ~40 s > max_seconds 30 s'
    """
    needed = SAFETY * needed_bytes
    if needed > budget:
        return f"needs ~{needed / 1e9:.3g} GB > budget {budget / 1e9:.3g} GB"
    if seconds is not None and max_seconds is not None and seconds > max_seconds:
        return f"needs ~{seconds:.3g} s > max_seconds {max_seconds:g} s"
    return None


def memory_probe(device):
    """The probe of `device`, a context manager whose `measure(method, n, d, *, causal, dtype)`
    returns `(peak_bytes, how)` of one call of a method of METHODS, how in
    {"cuda.max_memory_allocated", "VmHWM", "ru_maxrss"}."""
    if torch.device(device).type == "cuda":
        return CudaMemoryProbe(device)
    return CpuMemoryProbe()


def cuda_peak_bytes(function, device):
    """Peak CUDA memory one call of `function()` allocates beyond what was allocated before."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    function()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


class CudaMemoryProbe:
    """Measures CUDA points in this process, with `cuda_peak_bytes`."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        return False

    def measure(self, method, n, d, *, causal, dtype):
        """(peak_bytes, how) of one call."""
        from linattn_core.bench.methods import METHODS

        q, k, v = make_inputs(n, d, dtype=dtype, device=self.device)
        with torch.inference_mode():
            peak = cuda_peak_bytes(lambda: METHODS[method].run(q, k, v, causal), self.device)
        return peak, "cuda.max_memory_allocated"


class CpuMemoryProbe:
    """Measures CPU points, each in a fresh process forked from an idle one.

    Starting Python and importing torch takes seconds, so a helper process does it once, with
    the fixed mmap threshold in its environment, and then forks one child per point: every child
    starts from a process that has imported torch and linattn_core and run nothing else.

    >>> with CpuMemoryProbe() as probe:
    ...     peak, how = probe.measure("softmax_naive", 1024, 16, causal=False, dtype=torch.float32)
    >>> 2 * 1024**2 * 4 <= peak < 4 * 1024**2 * 4  # scores and probabilities, 1024² float32 each
    True
    """

    def __enter__(self):
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
        self._server = subprocess.Popen(
            [sys.executable, "-m", "linattn_core.bench.memory"],  # serve_forks
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Wait for the imports (seconds of CPU): a probe still starting would slow the timings
        # that run beside it.
        ready = self._server.stdout.readline().strip()
        if ready != "ready":
            error = self._server.stderr.read()
            raise RuntimeError(f"CpuMemoryProbe: the measuring process did not start:\n{error}")
        return self

    def measure(self, method, n, d, *, causal, dtype):
        """(peak_bytes, how) of one call, measured in a freshly forked child."""
        request = {"method": method, "n": n, "d": d, "causal": causal}
        request["dtype"] = str(dtype).removeprefix("torch.")
        request["threads"] = torch.get_num_threads()  # as many as the timed runs
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(
                f"CpuMemoryProbe: the measuring process exited:\n{self._server.stderr.read()}"
            )
        result = json.loads(line)
        if "error" in result:
            raise RuntimeError(
                f"CpuMemoryProbe: measuring {method} at N={n} failed: {result['error']}"
            )
        return result["peak_bytes"], result["how"]

    def __exit__(self, *exception):
        self._server.stdin.close()
        self._server.wait()
        self._server.stdout.close()
        self._server.stderr.close()


def serve_forks():
    """The helper process of `CpuMemoryProbe` (`python -m linattn_core.bench.memory`): reads one
    JSON request per line, forks a child that measures it with `_child`, prints the result."""
    print("ready", flush=True)  # imports done: nothing of this process competes with timings now
    for line in sys.stdin:
        readable, writable = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(readable)
            try:
                result = _child(**json.loads(line))
            except BaseException as error:
                result = {"error": repr(error)}
            os.write(writable, json.dumps(result).encode())
            os._exit(0)
        os.close(writable)
        with os.fdopen(readable, "rb") as reply:
            data = reply.read().decode()
        _, status = os.waitpid(pid, 0)
        if not data:
            data = json.dumps({"error": f"the child ended with status {status} and no result"})
        print(data, flush=True)


def _status_bytes(key):
    """A `kB` line of /proc/self/status (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key} line")


def _reset_high_water_mark():
    """Reset VmHWM to the current resident size; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def resident_peak_growth(function):
    """(bytes, how, function()): how far this process's peak resident memory rose above its
    resident memory before the call, how in {"VmHWM", "ru_maxrss"} (see the module's docstring;
    run it in a fresh process, with MALLOC_MMAP_THRESHOLD_ fixed, for a call's own peak)."""
    reset = _reset_high_water_mark()
    before = _status_bytes("VmRSS")
    result = function()
    if reset:
        peak, how = _status_bytes("VmHWM"), "VmHWM"
    else:
        peak, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss"
    return max(0, peak - before), how, result


def _child(method, n, d, causal, dtype, threads):
    """The measurement in a fresh process: returns {"peak_bytes", "how"}."""
    from linattn_core.bench.methods import METHODS

    torch.set_num_threads(threads)
    run = METHODS[method].run
    dtype = getattr(torch, dtype)
    q, k, v = make_inputs(n, d, dtype=dtype)
    with torch.inference_mode():
        run(*make_inputs(min(n, WARMUP_N), d, dtype=dtype), causal)  # one-time initialization
        peak, how, out = resident_peak_growth(lambda: run(q, k, v, causal))
    del out
    return {"peak_bytes": peak, "how": how}


if __name__ == "__main__":
    serve_forks()
