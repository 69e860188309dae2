"""Where a measurement comes from: device, versions, date, command, machine load."""

import datetime
import importlib.metadata
import os
import platform
import shlex
import sys

import torch


def provenance(device, *, command=None):
    """A dict that says where and how a measurement was taken, stored with its results.

    Args:
        device: "cpu" or a CUDA device.
        command: the command line; None means this process's `sys.argv`.

    >>> sorted(provenance("cpu", command="python -m linattn_core.bench"))[:4]
    ['command', 'cpu_pressure_avg10', 'date', 'device']
    """
    return {
        "command": command if command is not None else _command_line(),
        "cpu_pressure_avg10": cpu_pressure(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(device),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "numpy": _version("numpy"),
    }


def device_name(device):
    """'NVIDIA H100 80GB HBM3' for a CUDA device; the CPU model and core count for the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            models = [line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line]
        model = models[0] if models else model
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} logical cores)"


def cpu_pressure():
    """The 'some avg10' of /proc/pressure/cpu: the share of the last 10 s that runnable tasks
    waited for a CPU (other load inflates timings); None where the file does not exist."""
    try:
        with open("/proc/pressure/cpu") as pressure:
            fields = pressure.readline().split()
    except OSError:
        return None
    return float(dict(field.split("=") for field in fields[1:])["avg10"])


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _command_line():
    arguments = list(sys.argv)
    if arguments and arguments[0].endswith("__main__.py"):
        arguments[0] = "python -m " + __package__
    return " ".join(shlex.quote(a) if i else a for i, a in enumerate(arguments))
