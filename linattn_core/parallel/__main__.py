"""`python -m linattn_core.parallel --world-size 4`: one sequence over several CPU processes.

Starts `--world-size` gloo processes on this machine, splits a sequence of `--n` tokens (one
or several lengths) into equal contiguous shards, and runs context parallel linear attention
and the delta rule forward and backward on them. Prints each operation's largest relative
error against one process (outputs, final state, gradients; float64), the bytes each rank
passed to the collectives (counted, and predicted by `bytes_per_rank`), and the median times
of the forward and backward pass after a warm-up: the slowest rank against one process doing
the whole sequence, every process with `--threads` torch threads. `--json PATH` also writes
the numbers with their provenance. On GPUs, `torchrun` starts the processes instead (see
`linattn_core.parallel`'s docstring).
"""

import argparse
import json

import torch

from linattn_core.parallel import demo, launch
from linattn_core.provenance import provenance

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def main(argv=None):
    args = _parser().parse_args(argv)
    cases = _cases(args)
    results = launch.run(
        demo.measure,
        args.world_size,
        cases,
        args.repeats,
        timeout=args.timeout,
        threads=args.threads,
    )
    torch.set_num_threads(args.threads)  # one process with as many threads as each rank
    one = [demo.one_process_seconds(case, args.repeats) for case in cases]
    report = _report(args, cases, results, one)
    for line in _lines(args, report):
        print(line)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"provenance": provenance("cpu"), **report}, file, indent=1)


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m linattn_core.parallel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--world-size", type=int, default=4, help="processes (default 4)")
    parser.add_argument("--n", type=int, nargs="+", default=[4096], help="tokens (4096)")
    parser.add_argument("--heads", type=int, default=2, help="heads (default 2)")
    parser.add_argument("--d", type=int, default=32, help="key features d (default 32)")
    parser.add_argument("--d-v", type=int, default=32, help="value features (default 32)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    parser.add_argument("--method", default="chunked", help="every rank's method (chunked)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median; 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads a process (1)")
    parser.add_argument("--timeout", type=float, default=120.0, help="collective timeout (s)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    return parser


def _cases(args):
    """Linear attention (normalized) and the delta rule on equal shards of each length."""
    if args.world_size < 1 or min(args.n) < 0:
        raise SystemExit("--world-size must be at least 1 and --n non-negative")
    cases = []
    for n in args.n:
        share, extra = divmod(n, args.world_size)
        lengths = [share + (rank < extra) for rank in range(args.world_size)]
        common = {
            "lengths": lengths,
            "batch": (args.heads,),
            "d": args.d,
            "d_v": args.d_v,
            "dtype": DTYPES[args.dtype],
            "seed": 0,
            "method": args.method,
            "reference": args.method,
        }
        cases += [dict(common, kind="linear", normalize=True), dict(common, kind="delta")]
    return cases


def _report(args, cases, results, one):
    """Per operation and length: worst error over ranks and quantities, bytes, times."""
    report = {
        "world_size": args.world_size,
        "heads": args.heads,
        "d": args.d,
        "d_v": args.d_v,
        "dtype": args.dtype,
        "threads": args.threads,
        "runs": [],
    }
    for i, case in enumerate(cases):
        ranks = [result["compare"][i] for result in results]
        report["runs"].append(
            {
                "operation": case["kind"],
                "n": sum(case["lengths"]),
                "max_relative_error": max(max(r["errors"].values()) for r in ranks),
                "bytes_per_rank": ranks[0]["bytes"],
                "predicted_bytes_per_rank": ranks[0]["predicted"],
                "same_bytes_on_every_rank": all(r["bytes"] == ranks[0]["bytes"] for r in ranks),
                "seconds_slowest_rank": max(result["seconds"][i] for result in results),
                "seconds_one_process": one[i],
            }
        )
    return report


def _lines(args, report):
    names = {"linear": "linear attention", "delta": "delta rule"}
    yield (
        f"{args.world_size} gloo processes ({args.threads} thread(s) each), equal shards, "
        f"{args.heads} heads, d = {args.d}, d_v = {args.d_v}, {args.dtype}"
    )
    for run in report["runs"]:
        sent, predicted = run["bytes_per_rank"], run["predicted_bytes_per_rank"]
        yield (
            f"{names[run['operation']]}, N = {run['n']}: max relative error against one "
            f"process {run['max_relative_error']:.1e}; bytes per rank: forward "
            f"{sent['forward']}, backward {sent['backward']}, metadata {sent['metadata']} "
            f"({'as' if sent == predicted else 'NOT as'} predicted); forward + backward "
            f"{run['seconds_slowest_rank']:.3f} s on {args.world_size} processes, "
            f"{run['seconds_one_process']:.3f} s on one"
        )


if __name__ == "__main__":
    main()
