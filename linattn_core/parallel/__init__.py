"""Context parallelism: one sequence split across processes, on `torch.distributed`.

A long sequence is cut into contiguous shards, one per rank of a process group, in rank order.
Causal linear attention and the delta rule need, on each rank, only the state of the tokens
before its shard, a d_v×d matrix whatever N is: each rank summarizes its shard as an affine map
of that state, one all-gather exchanges the summaries, and each rank composes those of the ranks
before it (LASP-2, Sun et al. 2025). Any backend: gloo on CPUs, nccl on GPUs.

- `context_parallel_linear_attention`, `context_parallel_delta_rule` (`context`): the two
  operations, differentiable across ranks;
- `exchange`: the agreement check, the counted all-gather, the merge and its backward pass
  (`PassState`), `count_bytes` and `bytes_per_rank`;
- `launch`: start a group of gloo processes on one machine (the demo's and the tests' way);
- `demo`: each rank's comparison with one process; `python -m linattn_core.parallel
  --world-size 4` runs it and prints errors, bytes and times.

On GPUs the processes come from `torchrun --nproc-per-node=8 script.py`, one per GPU, and the
script sets its device and joins the group before calling the operations on its shard:

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.distributed.init_process_group("nccl")
    o = context_parallel_linear_attention(phi_q, phi_k, v)  # this rank's (B, H, N_r, ·)
"""

from linattn_core.parallel.context import (
    context_parallel_delta_rule,
    context_parallel_linear_attention,
)
from linattn_core.parallel.exchange import bytes_per_rank, count_bytes

__all__ = [
    "bytes_per_rank",
    "context_parallel_delta_rule",
    "context_parallel_linear_attention",
    "count_bytes",
]
