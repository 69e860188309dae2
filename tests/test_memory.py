"""The O(N) forms stay O(N) in memory: a long sequence in a fresh process, whose peak resident
memory is measured by the kernel. One N×N float64 matrix at N = 65536 would take 34 GB."""

import subprocess
import sys
from pathlib import Path

import pytest

N, D = 65536, 32
PEAK_LIMIT_BYTES = 600 * 2**20

# Prints the peak resident set size (VmHWM, KiB) and the relative error of a few output rows,
# each checked against the definition in O(N d). VmHWM belongs to the child's own address space;
# ru_maxrss would not do: Linux carries it over from the parent (the big pytest process) through
# fork and exec.
CHILD = f"""
import re, sys
from linattn_core import linear_attention
from linattn_core.testing import random_qkv, relative_error

phi_q, phi_k, v = random_qkv(n={N}, d={D}, positive=True)
out = linear_attention(phi_q, phi_k, v, causal=True, method=sys.argv[1])
with open("/proc/self/status") as status:
    peak_kib = int(re.search(r"VmHWM:\\s*(\\d+) kB", status.read()).group(1))
errors = []
for i in (0, 4321, {N} - 1):
    similarities = phi_k[: i + 1] @ phi_q[i]
    expected = similarities @ v[: i + 1] / (similarities.sum() + 1e-6)
    errors.append(relative_error(out[i], expected))
print(peak_kib, max(errors))
"""


@pytest.mark.parametrize("method", ["recurrent", "chunked"])
def test_long_causal_sequence_stays_in_linear_memory(method):
    root = Path(__file__).resolve().parents[1]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, method],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    peak_kib, error = child.stdout.split()
    assert int(peak_kib) * 1024 < PEAK_LIMIT_BYTES, f"{method}: peak RSS {int(peak_kib) >> 10} MiB"
    assert float(error) < 1e-10, f"{method}: relative error {error}"
