"""Which CPU kernels compute the numbers: `numerics: portable` (the default) or `native`.

torch, MKL and oneDNN pick their kernels by the processor's instruction set (SSE4, AVX2, AVX-512),
and the kernels round differently. A last-bit difference in SFT's first steps becomes another
starting policy after thousands of steps, so with native kernels the rows of a seed are a function
of the processor as well as of the seed.

`portable` pins every kernel choice to the x86-64 baseline, which every x86-64 CPU that torch
runs on has:
- ATEN_CPU_CAPABILITY=default: ATen's vectorised kernels (softmax, GELU, norms, SDPA, reductions)
  use their baseline build, not the AVX2 or AVX-512 one;
- MKL_CBWR=COMPATIBLE: MKL's conditional numerical reproducibility, its SSE2 branch (matmuls and
  the vector maths), the same on Intel and AMD;
- ONEDNN_MAX_CPU_ISA=SSE41: oneDNN's kernels capped to the same level;
- torch.use_deterministic_algorithms(True), and torch's intra-op threads fixed by the scenario
  (`runtime.torch_threads`: the reductions split by thread count, so the rows are those of one
  thread count).
`native` leaves torch, MKL and oneDNN their fastest kernels: rows reproduce on the same processor
only. benchmarks/numerics_cost.py measures what `portable` costs (README, "Reproducibility").

The three variables are read when torch and MKL load, so they must be in the environment before
torch is imported: `import testbed` sets them (from TESTBED_NUMERICS, default portable), the
Makefile exports them, Ray workers get them in their runtime environment, and the CLI re-executes
itself when a scenario asks for the other mode than the process has (`mode_problem`).
"""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Any, Literal

Mode = Literal["portable", "native"]
MODES: tuple[str, ...] = ("portable", "native")
ENV_VAR = "TESTBED_NUMERICS"
PINNED_VAR = "TESTBED_NUMERICS_PINNED"  # the variables portable set (a native child removes them)
PORTABLE_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}
PORTABLE_CAPABILITY = "DEFAULT"  # what torch.backends.cpu.get_cpu_capability() says under portable
# the CPU flags that decide which kernels the native mode gets
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
)


def requested_mode(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """The mode TESTBED_NUMERICS asks for (unset: portable)."""
    value = (environ if environ is not None else os.environ).get(ENV_VAR, "portable").strip().lower() or "portable"
    if value not in MODES:
        raise ValueError(f"{ENV_VAR}={value!r}: expected one of {', '.join(MODES)}")
    return value


def environment_for(mode: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of `environ` (default: this process's) set up for `mode`: portable pins the variables
    (and names them in PINNED_VAR); native removes those a portable parent pinned, and keeps a
    user's own choice (e.g. ATEN_CPU_CAPABILITY=avx2)."""
    env = dict(os.environ if environ is None else environ)
    env[ENV_VAR] = mode
    if mode == "portable":
        env.update(PORTABLE_ENV)
        env[PINNED_VAR] = " ".join(PORTABLE_ENV)
    else:
        for key in env.pop(PINNED_VAR, "").split():
            env.pop(key, None)
    return env


def apply_environment() -> None:
    """Set this process's environment for TESTBED_NUMERICS; effective only before torch loads
    (`import testbed` calls it first thing)."""
    wanted = environment_for(requested_mode())
    for key in (*PORTABLE_ENV, PINNED_VAR):
        if key in wanted:
            os.environ[key] = wanted[key]
        else:
            os.environ.pop(key, None)
    os.environ[ENV_VAR] = wanted[ENV_VAR]


def worker_env() -> dict[str, str]:
    """The variables a Ray worker needs to compute as this process does (its runtime_env)."""
    mode = requested_mode()
    env = {ENV_VAR: mode}
    env.update({key: os.environ[key] for key in (*PORTABLE_ENV, PINNED_VAR) if key in os.environ})
    return env


def torch_capability() -> str:
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def mode_in_force() -> str:
    """The mode this process computes in: portable only if torch really runs its baseline
    kernels and MKL's COMPATIBLE branch (torch imported before the variables were set does not)."""
    portable = (
        requested_mode() == "portable"
        and torch_capability() == PORTABLE_CAPABILITY
        and all(os.environ.get(k) == v for k, v in PORTABLE_ENV.items())
    )
    return "portable" if portable else "native"


def numerics_tag() -> str:
    """For cache keys: `portable`, or `native-<capability>` (a native model is its processor's)."""
    mode = mode_in_force()
    return mode if mode == "portable" else f"native-{torch_capability()}"


def mode_problem(wanted: str) -> str | None:
    """Why this process cannot run a scenario with `numerics: wanted`, or None."""
    have = mode_in_force()
    if have == wanted:
        return None
    if wanted == "portable" and requested_mode() == "portable":
        return (
            f"numerics: portable, but torch was loaded before its kernels were pinned (CPU capability "
            f"{torch_capability()}, expected {PORTABLE_CAPABILITY}); import testbed before torch, or set "
            + " ".join(f"{k}={v}" for k, v in PORTABLE_ENV.items())
            + " in the environment"
        )
    return (
        f"numerics: {wanted}, but this process computes with {have} kernels; set {ENV_VAR}={wanted} "
        "before Python starts (the CLI does this itself)"
    )


def configure_torch(threads: int) -> None:
    """torch's intra-op threads (Ray sets OMP_NUM_THREADS=1 in its workers, so always explicit) and,
    in portable mode, deterministic algorithms."""
    import torch

    if problem := mode_problem(requested_mode()):
        raise RuntimeError(problem)  # e.g. a worker that loaded torch before its variables were set
    torch.set_num_threads(threads)
    if requested_mode() == "portable":
        torch.use_deterministic_algorithms(True, warn_only=True)


def reexec(mode: str, argv: list[str], module: str) -> None:
    """Replace this process by `python -m module argv...` with the environment of `mode`."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], environment_for(mode))


def cpu_description() -> dict[str, Any]:
    """The processor: model name and the instruction-set flags that decide native kernels."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            text = info.read()
        if found := re.search(r"^model name\s*:\s*(.+)$", text, re.M):
            model = found.group(1).strip()
        if found := re.search(r"^flags\s*:\s*(.+)$", text, re.M):
            flags = set(found.group(1).split())
    except OSError:
        pass
    return {"model": model, "machine": platform.machine(), "isa_flags": [f for f in ISA_FLAGS if f in flags]}


def blas_description() -> dict[str, str | None]:
    """torch's BLAS and oneDNN, as its build configuration says."""
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", config)
    onednn = re.search(r"MKL-DNN v([^\s]+)", config)
    return {
        "blas": blas.group(1) if blas else None,
        "mkl": mkl.group(1) if mkl else None,
        "onednn": onednn.group(1) if onednn else None,
    }


def describe() -> dict[str, Any]:
    """What the manifest records: the mode, torch's kernels, the pinning variables, threads,
    the CPU and the BLAS. Two runs with equal `key` fields compute the same bits for a seed."""
    import torch

    return {
        "mode": mode_in_force(),
        "torch_cpu_capability": torch_capability(),
        "env": {key: os.environ.get(key) for key in (*PORTABLE_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "torch_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cpu": cpu_description(),
        **blas_description(),
    }


def comparison_key(numerics: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """What must agree for two runs' rows to be comparable bit for bit: the mode and torch's
    capability, and, in native mode, the CPU (its kernels are the processor's)."""
    if not numerics:
        return None
    key: tuple[Any, ...] = (
        numerics.get("mode"),
        numerics.get("torch_cpu_capability"),
        numerics.get("mkl"),
        numerics.get("torch_threads"),
    )
    if numerics.get("mode") != "portable":
        key += (numerics.get("cpu", {}).get("model"), tuple(numerics.get("cpu", {}).get("isa_flags", ())))
    return key
