"""Compile every Triton kernel of `linear_attention` and `delta_rule` (method="triton") for NVIDIA
GPUs, on a machine without one, and report what the compiler made of it.

    python -m linattn_core.kernels.compile [--arch 80 90] [--json PATH] [--jobs N]
    python -m linattn_core.kernels.compile --check figures/kernels_compiled.json

Triton's whole pipeline (Triton IR → GPU IR → LLVM → PTX → ptxas → cubin) runs on a CPU. The
check runs the package's own launchers on small CPU tensors with Triton's launch intercepted,
so each kernel is specialized exactly as a real launch would specialize it (Triton's binder
on the real arguments: dtypes, pointer alignment, constexprs, warps, stages), then compiles it
for each architecture and reads

    registers, spill_bytes  ptxas' own report (`-v`): registers per thread, bytes spilled to
                            local memory (stores; loads are reported beside them);
    shared_bytes            the shared memory the kernel asks for (Triton's metadata);
    mma_instructions        tensor-core instructions in the SASS (HMMA on sm_80; HGMMA and HMMA
                            on sm_90), and their opcodes, which name the operand type;
    programs_per_sm         occupancy: programs that fit one multiprocessor at once, limited by
                            registers, shared memory, warps and the block limit.

A record's status is "ok" or the reason it fails: a compile error, a spill, shared memory over
the architecture's limit, or a 16-bit kernel that does not multiply on its own tensor cores
(no MMA, or TF32 MMA where the kernel is not one of FLOAT32_KERNELS). The command exits with 1
when any record fails.

Each record carries `inputs`, a hash of everything that decides its binary: the kernel's source
(with the `@triton.jit` functions it calls, but not their line numbers: `source_key`), the
architecture, Triton's version (and so its ptxas), the specialization of the arguments and the
launch options (tiles, warps, stages, register budgets). Compiled results are cached under that
hash, which names no path, so a second run, or a second clone on the same machine, takes seconds.
`--check REPORT` compiles nothing but a sample: it fails when a committed record is missing, extra
or stale (its `inputs` differ from this checkout's), then compiles `SAMPLE` cold and fails unless
each result equals its record.
"""

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.metadata
import io
import itertools
import json
import multiprocessing
import os
import pickle
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, KernelInterface, create_function_from_signature

from linattn_core.kernels.common import INTERPRETED
from linattn_core.kernels.tiles import GPU_LIMITS
from linattn_core.kernels.tools.launches import (
    DTYPES,
    FLA_CONFIGS,
    FLA_CONFIGS_SM80,
    cases,
    linear_attention_launches,
)

RESERVED_SHARED = 1024  # bytes of shared memory the driver reserves per program
DEFAULT_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "linattn_core" / "compile"
)


def compile_launch(launch, arch, cache_dir=None):
    """Compile `launch` for compute capability `arch`: a dict of what the compiler reports."""
    options, signature, constexprs, attrs = _specialized(launch, arch)
    key = _inputs_hash(launch.kernel, arch, signature, constexprs, attrs, options)
    cached = cache_dir and Path(cache_dir, f"{key}.json")
    if cached and cached.exists():
        return json.loads(cached.read_text())
    result = {"source_hash": source_key(launch.kernel)[:16], "inputs": key}
    try:
        target = GPUTarget("cuda", arch, 32)
        result |= _compile(launch.kernel, target, signature, constexprs, attrs, options)
    except Exception as error:  # a failed compile is a result to report, not a crash
        result["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(result))
    return result


def _compile(kernel, target, signature, constexprs, attrs, options):
    source = ASTSource(kernel, signature, constexprs, attrs)
    log = io.StringIO()
    with (
        _knob(triton.knobs.nvidia, "dump_ptxas_log", True),
        _knob(triton.knobs.compilation, "always_compile", True),
        contextlib.redirect_stdout(log),
    ):
        compiled = triton.compile(source, target=target, options=options.__dict__)
    ptxas = log.getvalue()
    opcodes = _mma_opcodes(compiled.asm["cubin"])
    return {
        "registers": int(re.search(r"Used (\d+) registers", ptxas).group(1)),
        "spill_bytes": int(re.search(r"(\d+) bytes spill stores", ptxas).group(1)),
        "spill_load_bytes": int(re.search(r"(\d+) bytes spill loads", ptxas).group(1)),
        "shared_bytes": compiled.metadata.shared,
        "num_warps": compiled.metadata.num_warps,
        "num_stages": compiled.metadata.num_stages,
        "mma_instructions": sum(opcodes.values()),
        "mma_opcodes": sorted(opcodes),
    }


@contextlib.contextmanager
def _knob(group, name, value):
    previous = getattr(group, name)
    setattr(group, name, value)
    try:
        yield
    finally:
        setattr(group, name, previous)


def _mma_opcodes(cubin):
    """{opcode: count} of the tensor-core instructions (HMMA, HGMMA) in a cubin's SASS."""
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        sass = subprocess.run(
            [tools / "cuobjdump", "-sass", file.name], capture_output=True, text=True, check=True
        ).stdout
    counts = {}
    for opcode in re.findall(r"\b(H[G]?MMA\.[\w.]+)", sass):
        counts[opcode] = counts.get(opcode, 0) + 1
    return counts


def _specialized(launch, arch):
    """(options, signature, constexprs, attrs): Triton's specialization of `launch` for `arch`,
    exactly as `kernel[grid](...)` would make it."""
    backend, binder = _binder(launch.kernel, arch)
    kwargs = dict(launch.kwargs, debug=False)
    kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    bound, specialization, options = binder(*launch.args, **kwargs)
    return launch.kernel._pack_args(backend, kwargs, bound, specialization, options)


@functools.cache
def _binder(kernel, arch):
    """(backend, Triton's argument binder) of `kernel` for `arch`."""
    backend = make_backend(GPUTarget("cuda", arch, 32))
    return backend, create_function_from_signature(kernel.signature, kernel.params, backend)


def inputs_hash(launch, arch):
    """The hash of what decides `launch`'s binary on `arch` (a record's `inputs`), without
    compiling it."""
    options, signature, constexprs, attrs = _specialized(launch, arch)
    return _inputs_hash(launch.kernel, arch, signature, constexprs, attrs, options)


def _inputs_hash(kernel, arch, signature, constexprs, attrs, options):
    option_values = {
        # libdevice's path names the virtual environment; its file comes with Triton's version
        k: [(name, Path(path).name) for name, path in v] if k == "extern_libs" else str(v)
        for k, v in options.__dict__.items()
    }
    text = json.dumps(
        [
            source_key(kernel),
            arch,
            triton.__version__,
            signature,
            sorted((str(k), str(v)) for k, v in constexprs.items()),
            sorted((str(k), str(v)) for k, v in attrs.items()),
            sorted(option_values.items()),
        ],
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.cache
def source_key(kernel):
    """Triton's hash of `kernel`'s source and of the `@triton.jit` functions it calls, as Triton
    computes it but with every function's first line number set to 0: line numbers reach the
    binary only as debug locations, so a kernel that moves within its file, or to another file,
    keeps its records."""
    functions = _reachable(kernel)
    saved = [(function, function.starting_line_number, function.hash) for function in functions]
    try:
        for function in functions:
            function.starting_line_number, function.hash = 0, None
        return kernel.cache_key
    finally:
        for function, line, key in saved:
            function.starting_line_number, function.hash = line, key


def _reachable(kernel):
    """`kernel` and every `@triton.jit` function in the globals of its module, and of theirs (a
    superset of what it calls; autotuners and heuristics unwrapped)."""
    found, pending = set(), [kernel]
    while pending:
        function = pending.pop()
        while not isinstance(function, JITFunction):
            function = function.fn
        if function not in found:
            found.add(function)
            pending += [v for v in function.__globals__.values() if isinstance(v, KernelInterface)]
    return found


def occupancy(arch, registers, shared_bytes, num_warps):
    """Programs that fit one multiprocessor at once (CUDA's occupancy rules)."""
    limits = GPU_LIMITS[arch]
    registers_per_warp = -(-registers * 32 // 256) * 256  # allocated in units of 256
    by_registers = limits.registers_per_sm // (registers_per_warp * num_warps)
    by_shared = limits.shared_per_sm // (shared_bytes + RESERVED_SHARED)
    by_warps = limits.warps_per_sm // num_warps
    return min(by_registers, by_shared, by_warps, limits.programs_per_sm)


# Kernels that multiply in float32 whatever the inputs' dtype, by design: the delta rule's
# triangular inverse and its derivative (`delta_rule/forward.py`), where 16-bit operands would cost
# the inverse its accuracy. Their float32 products run as TF32 ones (three for one).
FLOAT32_KERNELS = {"delta_prepare_kernel", "delta_wy_kernel"}


def status(record):
    """ "ok", or why the kernel would not run well or at all on the record's architecture."""
    if "error" in record:
        return f"compile error: {record['error']}"
    problems = []
    if record["spill_bytes"]:
        problems.append(f"spills {record['spill_bytes']} bytes")
    limit = GPU_LIMITS[record["arch"]].shared_per_block
    if record["shared_bytes"] > limit:
        problems.append(f"shared memory {record['shared_bytes']} B > {limit} B")
    if record["dtype"] in ("bfloat16", "float16"):
        if not record["mma_instructions"]:
            problems.append("no tensor-core MMA")
        elif record.get("kernel") not in FLOAT32_KERNELS and any(
            "TF32" in opcode for opcode in record["mma_opcodes"]
        ):
            problems.append("TF32 MMA for 16-bit inputs")
    return "; ".join(problems) or "ok"


def launched(archs, dtypes=tuple(DTYPES), *, peer=None):
    """(record, Launch) for every (architecture, configuration, kernel launch) of
    `launches.cases`: the record holds what identifies it (`IDENTITY`), nothing compiled yet."""
    work = []
    for arch in archs:
        for fields, launches in cases(arch, dtypes, peer=peer):
            for pass_, launch in launches:
                record = {"kernel": launch.name, "arch": arch, "pass": pass_} | fields
                record |= {"block_k": launch.kwargs.get("BK"), "block_v": launch.kwargs.get("BV")}
                work.append((record, launch))
    return work


def compile_records(
    archs,
    dtypes=tuple(DTYPES),
    *,
    peer=None,
    jobs=None,
    cache_dir=None,
    progress=True,
    work=None,
    known=(),
):
    """One record per (architecture, configuration, kernel launch) of `launches.cases` (or of
    `work`, pairs from `launched`), compiled in parallel, each binary once. A launch whose
    `inputs` are those of a record in `known` (a report's records) takes that record's results
    instead: the same inputs make the same binary."""
    work = launched(archs, dtypes, peer=peer) if work is None else work
    unique = {}
    for record, launch in work:
        unique.setdefault((_launch_id(launch), record["arch"]), launch)
    reusable = {r["inputs"]: {k: r[k] for k in RESULT if k in r} for r in known if "inputs" in r}
    results = {}
    if reusable:
        for (launch_id, arch), launch in unique.items():
            found = reusable.get(inputs_hash(launch, arch))
            if found is not None:
                results[launch_id, arch] = found
    uncompiled = {key: launch for key, launch in unique.items() if key not in results}
    results |= _compile_all(uncompiled, jobs, cache_dir, progress)
    records = []
    for fields, launch in work:
        record = fields | results[_launch_id(launch), fields["arch"]]
        if "error" not in record:
            record["programs_per_sm"] = occupancy(
                record["arch"], record["registers"], record["shared_bytes"], record["num_warps"]
            )
        record["status"] = status(record)
        records.append(record)
    return records


# What identifies a record of a report: the kernel launch and the configuration it serves.
IDENTITY = (
    "kernel",
    "arch",
    "pass",
    "op",
    "dtype",
    "d",
    "d_v",
    "chunk",
    "normalize",
    "initial_state",
)
# What `compile_launch` returns: the compiler's report on one binary.
RESULT = (
    "source_hash",
    "inputs",
    "error",
    "registers",
    "spill_bytes",
    "spill_load_bytes",
    "shared_bytes",
    "num_warps",
    "num_stages",
    "mma_instructions",
    "mma_opcodes",
)
# What a sample compiled anew must reproduce of its committed record.
COMPILED = (*(k for k in RESULT if k not in ("source_hash", "error")), "programs_per_sm", "status")
# What `check_report` compiles cold: every kernel on every architecture once, in the benchmarked
# dtype at the widest tiles (the first such launch of each kernel in `launched`'s order), and the
# gated delta rule's specializations of the same kernels once more, on the benchmarked Hopper.
SAMPLE_DTYPE, SAMPLE_DIMS, SAMPLE_GATED_ARCH = "bfloat16", (128, 128), 90
REGENERATE = "run `make kernels-report` and commit figures/kernels_compiled.json"


def identity(record):
    """The values of `IDENTITY` in `record` (None where it has no such field)."""
    return tuple(record.get(name) for name in IDENTITY)


def sample(work):
    """The pairs of `work` (from `launched`) that `check_report` compiles anew: each kernel of
    linear attention and of the delta rule once per architecture, and the delta rule's kernels
    with gates (other binaries of the same source) once, on `SAMPLE_GATED_ARCH`."""
    first = {}
    for record, launch in work:
        gated_elsewhere = record["op"] == "gated_delta_rule" and record["arch"] != SAMPLE_GATED_ARCH
        if (
            record["dtype"] == SAMPLE_DTYPE
            and (record["d"], record["d_v"]) == SAMPLE_DIMS
            and not gated_elsewhere
        ):
            first.setdefault((record["arch"], record["op"], record["kernel"]), (record, launch))
    return list(first.values())


def check_report(report, *, sample_compiled=True, jobs=None, progress=True):
    """What is wrong with a committed report ({"provenance", "records"}) for this checkout, one
    line a problem ([] when nothing is). First, without compiling: a record missing for a launch
    of `launches.cases`, a record of no such launch, a record whose `inputs` differ from what this
    checkout would compile (a kernel, a tile, a register budget or Triton changed), a failing
    record. If none and `sample_compiled`, the launches of `sample` are compiled cold, and each
    result must equal its record."""
    committed = {identity(r): r for r in report["records"]}
    work = launched(sorted({r["arch"] for r in report["records"]}))
    expected = {identity(record): (record, launch) for record, launch in work}
    problems = [
        f"no such launch: {_named(committed[key])}" for key in committed.keys() - expected.keys()
    ]
    for key, (record, launch) in expected.items():
        found = committed.get(key)
        if found is None:
            problems.append(f"missing: {_named(record)}")
        elif found.get("inputs") != inputs_hash(launch, record["arch"]):
            problems.append(f"stale (its kernel, tiles or Triton changed): {_named(record)}")
        elif found["status"] != "ok":
            problems.append(f"failing ({found['status']}): {_named(record)}")
    if problems:
        return [*problems, f"{len(problems)} records out of date: {REGENERATE}"]
    if not sample_compiled:
        return []
    for record in compile_records(None, work=sample(work), jobs=jobs, progress=progress):
        found = committed[identity(record)]
        differ = [
            f"{k} {found.get(k)!r} → {record.get(k)!r}"
            for k in COMPILED
            if found.get(k) != record.get(k)
        ]
        if differ:
            problems.append(f"compiled anew, {_named(record)} differs: {'; '.join(differ)}")
    return problems


def _named(record):
    return ", ".join(f"{name}={record[name]}" for name in IDENTITY if record.get(name) is not None)


def fit_register_budgets(records, *, jobs=None, cache_dir=None):
    """{(kernel, arch, dtype, d_k, d_v, gated): registers} for each configuration of `records` that
    spills: the smallest budget (ptxas' `maxnreg`, from the registers it chose in steps of 8)
    under which none of the configuration's launches spills, packed or not — entries for
    `tiles.REGISTER_BUDGETS`, or for `tiles.GATED_OPTIONS` where `gated` (the gated delta rule's
    launches take no budget of the other table, `forward.gated_options`)."""
    spilled = {}
    for r in records:
        if r.get("spill_bytes"):
            kernel, gated = r["kernel"].removesuffix("_kernel"), r["op"] == "gated_delta_rule"
            key = (kernel, r["arch"], r["dtype"], r["d"], r["d_v"], gated)
            spilled[key] = max(spilled.get(key, 0), r["registers"])
    keys = sorted(spilled)
    tasks = [(key, spilled[key], cache_dir) for key in keys]
    spawn = multiprocessing.get_context("spawn")  # the workers run torch: no fork after its threads
    with ProcessPoolExecutor(max_workers=jobs or os.cpu_count(), mp_context=spawn) as pool:
        return dict(zip(keys, pool.map(_fit_budget, tasks), strict=True))


def _fit_budget(task):
    (kernel, arch, dtype, d_k, d_v, gated), registers, cache_dir = task
    launches = [
        launch
        for fields, group in cases(arch, (dtype,))
        if (fields["d"], fields["d_v"]) == (d_k, d_v)
        and (fields["op"] == "gated_delta_rule") == gated
        for _, launch in group
        if launch.name == f"{kernel}_kernel"
    ]
    assert launches, f"no launch of {kernel} on sm_{arch} ({dtype}, {d_k}, {d_v})"
    for budget in [*range(registers // 8 * 8 + 8, 255, 8), 255]:
        budgeted = (dataclasses.replace(x, kwargs=x.kwargs | {"maxnreg": budget}) for x in launches)
        if not any(compile_launch(launch, arch, cache_dir)["spill_bytes"] for launch in budgeted):
            return budget
    raise RuntimeError(f"{kernel} spills on sm_{arch} ({dtype}, {d_k}, {d_v}) with 255 registers")


def tile_experiment(
    kernel, archs, variants, *, dtype="bfloat16", d=128, d_v=128, cache_dir=DEFAULT_CACHE
):
    """Compile one of causal linear attention's kernels (normalized, C = 64) with other launch
    options: a record for each architecture and variant, e.g. {"BV": 32, "num_warps": 8} (a
    variant's entries replace the launcher's own; "ok" status or why not, as in `status`).
    Results are cached in `cache_dir` (None: none) by what decides each binary, as the compile
    check's are: a second run (a chapter executed again) compiles nothing.

    Where the kernels are interpreted (TRITON_INTERPRET=1), the compile runs in a process of its
    own, whose kernels are the compiler's.
    """
    if INTERPRETED:
        return _in_compiler_process(
            tile_experiment, kernel, list(archs), list(variants), dtype=dtype, d=d, d_v=d_v,
            cache_dir=None if cache_dir is None else str(cache_dir),
        )  # fmt: skip
    records = []
    for arch in archs:
        (launch,) = [
            launch
            for _, launch in linear_attention_launches(arch, DTYPES[dtype], d, d_v, 64, True)
            if launch.name == kernel
        ][:1]
        for variant in variants:
            varied = dataclasses.replace(launch, kwargs=launch.kwargs | variant)
            record = {"kernel": kernel, "arch": arch, "dtype": dtype, "d": d, "d_v": d_v}
            record |= {"block_k": varied.kwargs["BK"], "block_v": varied.kwargs["BV"]}
            record |= compile_launch(varied, arch, cache_dir)
            if "error" not in record:
                record["programs_per_sm"] = occupancy(
                    arch, record["registers"], record["shared_bytes"], record["num_warps"]
                )
            record["status"] = status(record)
            records.append(record)
    return records


def _in_compiler_process(function, *args, **kwargs):
    """function(*args, **kwargs) (JSON in and out) in a Python without TRITON_INTERPRET."""
    code = (
        "import json, sys\n"
        f"from {function.__module__} import {function.__name__}\n"
        "args, kwargs = json.loads(sys.stdin.read())\n"
        f"print(json.dumps({function.__name__}(*args, **kwargs)))\n"
    )
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([args, kwargs]),
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode:
        raise RuntimeError(f"the compile failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _launch_id(launch):
    """What decides the compiled binary: the kernel, Triton's specialization of the arguments
    (dtypes, alignments, constexprs), warps and stages."""
    _, binder = _binder(launch.kernel, 90)
    _, specialization, options = binder(*launch.args, **launch.kwargs)
    return (launch.kernel.fn.__module__, launch.name, repr(specialization), repr(options))


def _compile_all(unique, jobs, cache_dir, progress):
    """{(launch id, arch): result} for `unique`, {(launch id, arch): Launch}."""
    # pickled here, by value: through the pool's own pickler, torch shares each tensor argument
    # by a file descriptor that the workers keep, and the matrix's launches exhaust them (EMFILE)
    tasks = [pickle.dumps((launch, arch, cache_dir)) for (_, arch), launch in unique.items()]
    with ProcessPoolExecutor(max_workers=jobs or os.cpu_count()) as pool:
        outcomes = pool.map(_compile_task, tasks, chunksize=4)
        if progress:
            from tqdm.auto import tqdm

            outcomes = tqdm(outcomes, total=len(tasks), desc="compiling", leave=False, disable=None)
        return dict(zip(unique, outcomes, strict=True))


def _compile_task(task):
    launch, arch, cache_dir = pickle.loads(task)
    return compile_launch(launch, arch, cache_dir)


def summary(records):
    """Lines of a table: per architecture, dtype and kernel, the worst case over head dims, chunk
    sizes and normalization, and every failing record in full."""
    lines = [
        f"{'arch':<6}{'dtype':<10}{'kernel':<26}{'registers':>10}{'spill B':>9}{'shared KiB':>12}"
        f"{'programs/SM':>13}  MMA"
    ]
    key = lambda r: (r["arch"], r["dtype"], r["kernel"])  # noqa: E731
    for (arch, dtype, kernel), group in itertools.groupby(sorted(records, key=key), key=key):
        group = [r for r in group if "error" not in r]
        if not group:
            continue
        opcodes = sorted({o for r in group for o in r["mma_opcodes"]})
        mma = ", ".join(opcodes) if opcodes else "none (FFMA)"
        lines.append(
            f"sm_{arch:<3}{dtype:<10}{kernel:<26}"
            f"{_span(r['registers'] for r in group):>10}"
            f"{max(r['spill_bytes'] for r in group):>9}"
            f"{_span(round(r['shared_bytes'] / 1024, 1) for r in group):>12}"
            f"{_span(r['programs_per_sm'] for r in group):>13}  {mma}"
        )
    failures = [r for r in records if r["status"] != "ok"]
    lines.append(f"{len(records)} records, {len(failures)} failing")
    lines += [json.dumps(r) for r in failures]
    return lines


def load_report(path):
    """A committed compile report ({"provenance": …, "records": […]}, as `--json` writes it)."""
    return json.loads(Path(path).read_text())


def report_records(report, arch, d, dtype="bfloat16"):
    """The records of unnormalized causal linear attention at d = d_v on `arch`, one per kernel
    launch, forward then backward, of a sequence in segments (the path of long sequences, where
    the kernels compete with FLA's): the configuration that ours and FLA's reports share."""
    rows = {}
    for r in report["records"]:
        if (r["arch"], r["dtype"], r["d"], r["d_v"], r.get("normalize")) == (
            arch,
            dtype,
            d,
            d,
            False,
        ) and r["pass"] in ("forward", "backward"):
            rows.setdefault((r["pass"], r["kernel"]), r)
    return list(rows.values())


def tensor_core_kinds(opcodes):
    """ "HGMMA.64x64x16.F32.BF16" → "HGMMA BF16": the instructions and their operand types, in
    words (F16 where the opcode names none).

    >>> tensor_core_kinds(["HGMMA.64x64x16.F32.BF16", "HMMA.16816.F32", "HMMA.16816.F32.BF16"])
    'HGMMA BF16, HMMA BF16, HMMA F16'
    """
    kinds = {
        (o.split(".")[0], o.split(".")[-1] if o.endswith(("BF16", "TF32")) else "F16")
        for o in opcodes
    }
    return ", ".join(f"{name} {operands}" for name, operands in sorted(kinds))


def _span(values):
    values = sorted(values)
    return f"{values[0]}" if values[0] == values[-1] else f"{values[0]}–{values[-1]}"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m linattn_core.kernels.compile",
        description="Compile the Triton kernels for NVIDIA GPUs without a GPU; report registers, "
        "spills, shared memory, occupancy and tensor-core instructions.",
    )
    parser.add_argument("--arch", type=int, nargs="+", choices=sorted(GPU_LIMITS), default=[80, 90])
    parser.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=list(DTYPES))
    parser.add_argument(
        "--peer",
        choices=["fla"],
        help="compile flash-linear-attention's kernels instead (fla-core)",
    )
    parser.add_argument("--json", type=Path, help="write the records and their provenance here")
    parser.add_argument(
        "--fit-registers",
        action="store_true",
        help="for every configuration that spills, find and print the register budget that "
        "stops it (entries for tiles.REGISTER_BUDGETS)",
    )
    parser.add_argument(
        "--check",
        type=Path,
        metavar="REPORT",
        help="compile nothing but a sample: fail when a record of REPORT is missing or stale, or "
        "when the sample compiled anew differs from its records (the check of `make test`)",
    )
    parser.add_argument(
        "--no-sample",
        action="store_true",
        help="with --check: only whether every record is current (seconds; the pre-commit hook)",
    )
    parser.add_argument("--jobs", type=int, help="parallel compiles (default: one per CPU)")
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="compiled results kept between runs"
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="compile everything anew (by default a launch whose inputs are those of a record of "
        "the --json report, or of the cache, takes its results)",
    )
    arguments = parser.parse_args(argv)
    if arguments.check:
        problems = check_report(
            load_report(arguments.check),
            sample_compiled=not arguments.no_sample,
            jobs=arguments.jobs,
        )
        sampled = (
            ""
            if arguments.no_sample
            else "; the sample (each kernel on each architecture, and with gates on "
            f"sm_{SAMPLE_GATED_ARCH}, {SAMPLE_DTYPE}, d = d_v = {SAMPLE_DIMS[0]}) compiled anew "
            "equals its records"
        )
        print("\n".join(problems) or f"{arguments.check}: every record current{sampled}")
        return 1 if problems else 0
    fresh = arguments.no_cache or not (arguments.json and arguments.json.exists())
    records = compile_records(
        arguments.arch,
        tuple(arguments.dtype),
        peer=arguments.peer,
        jobs=arguments.jobs,
        cache_dir=None if arguments.no_cache else arguments.cache,
        known=() if fresh else load_report(arguments.json)["records"],
    )
    print("\n".join(summary(records)))
    if arguments.fit_registers:
        budgets = fit_register_budgets(records, jobs=arguments.jobs, cache_dir=arguments.cache)
        print("register budgets that stop the spills (tiles.REGISTER_BUDGETS):")
        print("\n".join(f"    {key!r}: {budget}," for key, budget in budgets.items()))
    if arguments.json:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(report_json(_provenance(arguments), records))
        print(f"wrote {arguments.json}")
    failing = any(r["status"] != "ok" for r in records)
    return 1 if failing and not arguments.peer else 0  # a peer's failures are findings, not ours


def report_json(provenance, records):
    """{"provenance": …, "records": […]} as JSON text, one record a line (diffs stay readable)."""
    lines = ",\n".join("  " + json.dumps(record) for record in records)
    return f'{{"provenance": {json.dumps(provenance, indent=1)},\n"records": [\n{lines}\n]}}\n'


def _provenance(arguments):
    from linattn_core.provenance import device_name, provenance

    command = " ".join(["python -m linattn_core.kernels.compile", *map(shlex.quote, sys.argv[1:])])
    origin = provenance("cpu", command=command)
    origin["device"] = "none: compiled on " + device_name("cpu")
    origin["targets"] = {f"sm_{a}": GPU_LIMITS[a].name for a in arguments.arch}
    origin["ptxas"] = _ptxas_version()
    if arguments.peer == "fla":
        origin["peer"] = f"fla-core {importlib.metadata.version('fla-core')}"
        origin["peer_configs"] = {
            f"{name} (sm_{arch})": str(config)
            for arch in arguments.arch
            for name, config in (FLA_CONFIGS if arch == 90 else FLA_CONFIGS_SM80).items()
        }
    return origin


def _ptxas_version():
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    return version.strip().splitlines()[-1]


if __name__ == "__main__":
    # `python -m` runs this file as __main__: run the module under its own name instead, which
    # its worker processes and its compiler subprocess import the functions from
    from linattn_core.kernels.compile import main as run

    sys.exit(run())
