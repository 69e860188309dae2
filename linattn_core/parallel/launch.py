"""Start a group of gloo processes on this machine and collect what each rank returns."""

import datetime
import pathlib
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["run"]


def run(fn, world_size, *args, timeout=60.0, threads=1):
    """fn(rank, world_size, *args) on `world_size` new processes joined in a gloo process group;
    returns the list of their return values, in rank order.

    The processes meet through a file in a temporary folder (no network port), each uses
    `threads` torch threads, and a collective that waits longer than `timeout` seconds raises
    (a rank that skips a collective cannot hang the others for ever). An exception in a rank
    is raised here (torch.multiprocessing.ProcessRaisedException, with its traceback). `fn`
    must be importable by name (a module-level function).
    """
    with tempfile.TemporaryDirectory() as folder:
        folder = pathlib.Path(folder)
        options = (fn, world_size, (folder / "rendezvous").as_uri(), folder, timeout, threads)
        mp.start_processes(
            _rank_main, args=(*options, args), nprocs=world_size, start_method="spawn"
        )
        return [torch.load(folder / f"{rank}.pt", weights_only=False) for rank in range(world_size)]


def _rank_main(rank, fn, world_size, init_method, folder, timeout, threads, args):
    """One process: join the group, run fn, store its result for the parent."""
    torch.set_num_threads(threads)
    dist.init_process_group(
        "gloo",
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout),
    )
    try:
        torch.save(fn(rank, world_size, *args), folder / f"{rank}.pt")
    finally:
        dist.destroy_process_group()
