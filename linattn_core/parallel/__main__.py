"""`python -m linattn_core.parallel --world-size 4`: one sequence over several CPU processes.

Starts `--world-size` gloo processes on this machine, splits a sequence of `--n` tokens into
equal contiguous shards, and runs context parallel linear attention and the delta rule forward
and backward on them. Prints each operation's largest relative error against one process
(outputs, final state, gradients; float64), the bytes each rank passed to the collectives
(counted, and predicted by `bytes_per_rank`), and the median times of the forward and backward
pass: the slowest rank against one process doing the whole sequence. `--json PATH` also writes
the numbers with their provenance.
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
    parser.add_argument("--n", type=int, default=4096, help="tokens in all (default 4096)")
    parser.add_argument("--heads", type=int, default=2, help="heads (default 2)")
    parser.add_argument("--d", type=int, default=32, help="key features d (default 32)")
    parser.add_argument("--d-v", type=int, default=32, help="value features (default 32)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    parser.add_argument("--method", default="chunked", help="every rank's method (chunked)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median; 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (1)")
    parser.add_argument("--timeout", type=float, default=120.0, help="collective timeout (s)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    return parser


def _cases(args):
    """Linear attention (normalized) and the delta rule on equal shards of the sequence."""
    if args.world_size < 1 or args.n < 0:
        raise SystemExit("--world-size must be at least 1 and --n non-negative")
    share, extra = divmod(args.n, args.world_size)
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
    return [dict(common, kind="linear", normalize=True), dict(common, kind="delta")]


def _report(args, cases, results, one):
    """Per operation: worst error over ranks and quantities, bytes per rank, times."""
    report = {
        "world_size": args.world_size,
        "n": args.n,
        "heads": args.heads,
        "d": args.d,
        "d_v": args.d_v,
        "dtype": args.dtype,
        "threads": args.threads,
        "operations": {},
    }
    for i, case in enumerate(cases):
        ranks = [result["compare"][i] for result in results]
        report["operations"][case["kind"]] = {
            "max_relative_error": max(max(r["errors"].values()) for r in ranks),
            "bytes_per_rank": ranks[0]["bytes"],
            "predicted_bytes_per_rank": ranks[0]["predicted"],
            "same_bytes_on_every_rank": all(r["bytes"] == ranks[0]["bytes"] for r in ranks),
            "seconds_slowest_rank": max(result["seconds"][i] for result in results),
            "seconds_one_process": one[i],
        }
    return report


def _lines(args, report):
    names = {"linear": "linear attention", "delta": "delta rule"}
    yield (
        f"{args.world_size} gloo processes ({args.threads} thread(s) each), N = {args.n} in "
        f"equal shards, {args.heads} heads, d = {args.d}, d_v = {args.d_v}, {args.dtype}"
    )
    for kind, numbers in report["operations"].items():
        sent = numbers["bytes_per_rank"]
        yield (
            f"{names[kind]}: max relative error against one process "
            f"{numbers['max_relative_error']:.1e}; bytes per rank: forward {sent['forward']}, "
            f"backward {sent['backward']}, metadata {sent['metadata']} (predicted: "
            f"{'same' if sent == numbers['predicted_bytes_per_rank'] else 'different'}); "
            f"forward + backward {numbers['seconds_slowest_rank']:.3f} s on "
            f"{args.world_size} processes, {numbers['seconds_one_process']:.3f} s on one"
        )


if __name__ == "__main__":
    main()
