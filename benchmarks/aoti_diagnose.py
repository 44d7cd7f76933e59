"""Which AOTInductor option crashes, found on a GPU machine: each configuration built and
run in a child process of its own, a table of what became of each, and the smallest
configuration that crashed written out as a reproduction.

    python3 benchmarks/aoti_diagnose.py [--device cuda|cpu] [--quick] [--budget-s S]
                                        [--jobs N] [--json FILE] [--repro-dir DIR]
                                        [--only NAME ...]

Why: on an H200 with torch 2.11 every AOTInductor build of ResNet-9 crashed its process
with SIGSEGV after compiling (FP16 and FP32, max-autotune as ``steps.optimize`` ships it on
a GPU). The configurations here start from what ships and change one thing each: FP32,
max-autotune off, its GEMM backends (ATen only, Triton only), its convolution backends,
its subprocess benchmarking, Inductor's compile worker pool, freezing, a static batch,
BatchNorm left unfolded, ``aoti_compile_and_package`` in one call, the small-batch program
(layout optimization off), the C++ wrapper without AOT (``torch.compile`` with
``cpp_wrapper``), plain ``torch.compile``, and the smallest network with the shipped
options. A child runs the very script ``aoti_reproduction.py`` writes for its
configuration, so the script kept for the smallest crash is its reproduction (torch only).

Made for a bare GPU machine like ``gpu.py``: torch and this checkout, nothing installed.
``--jobs`` children run at once (compiling is mostly CPU work; the compile seconds are
then not timings to quote). ``--device cpu --quick`` is its dry run, a test in CI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

# A bare GPU machine has this checkout but no install of it: the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.aoti_reproduction import RESULT, Config, script
from benchmarks.gpu_child import run_child

INJECTED = {  # --inject KIND:NAME, for the dry run's test: what runs as compiling starts
    "crash": "import ctypes; ctypes.string_at(0)",  # a real SIGSEGV
    "hang": "time.sleep(3600)",
}
HANG_LIMIT_S = 30.0  # an injected hang's time limit


def gpu_configs() -> list[Config]:
    """What ships on a GPU first, then one change each, most telling first."""
    shipped = {"freezing": True, "max_autotune": True}
    return [
        Config("shipped", "none: FP16, freezing, max-autotune, batch 1..256, BatchNorm folded, "
               "aot_compile + package_aoti (steps.optimize)", options=shipped, limit_s=240),
        Config("tiny", "the smallest network (one conv block)", model="tiny", options=shipped),
        Config("one-compile-thread", "no compile worker pool (TORCHINDUCTOR_COMPILE_THREADS=1)",
               options=shipped, env={"TORCHINDUCTOR_COMPILE_THREADS": "1"}, limit_s=240),
        Config("no-autotune", "max-autotune off", options={"freezing": True}),
        Config("fp32", "FP32", dtype="float32", options=shipped, limit_s=240),
        Config("autotune-in-process", "max-autotune benchmarks in this process",
               options={**shipped, "autotune_in_subproc": False}, limit_s=240),
        Config("gemm-aten", "max-autotune GEMM backends: ATen only",
               options={**shipped, "max_autotune_gemm_backends": "ATEN"}, limit_s=240),
        Config("gemm-triton", "max-autotune GEMM backends: Triton only",
               options={**shipped, "max_autotune_gemm_backends": "TRITON"}, limit_s=240),
        Config("conv-aten", "max-autotune convolution backends: ATen only",
               options={**shipped, "max_autotune_conv_backends": "ATEN"}, limit_s=240),
        Config("jit-cpp-wrapper", "torch.compile just in time with the C++ wrapper, no AOT",
               options={**shipped, "cpp_wrapper": True}, path="jit", limit_s=240),
        Config("jit", "torch.compile just in time, Python wrapper, no AOT", options=shipped,
               path="jit", limit_s=240),
        Config("one-call", "aoti_compile_and_package in one call (gpu.py's path)",
               options=shipped, path="compile_and_package", limit_s=240),
        Config("no-freezing", "freezing off", options={"max_autotune": True}, limit_s=240),
        Config("static-batch", "a static batch of 64", options=shipped, dynamic=False),
        Config("batchnorm-kept", "BatchNorm not folded", options=shipped, fold_batchnorm=False,
               limit_s=240),
        Config("small-batch-program", "layout optimization off (the small-batch program)",
               options={**shipped, "layout_optimization": False}, limit_s=240),
        Config("tiny-no-autotune", "the smallest network, max-autotune off", model="tiny",
               options={"freezing": True}),
    ]  # fmt: skip


def cpu_configs(quick: bool) -> list[Config]:
    """What ships on a CPU (FP32, freezing, no max-autotune), then one change each; quick:
    the smallest network, three configurations."""
    shipped = {"freezing": True}
    model = "tiny" if quick else "resnet9"
    found = [
        Config("shipped", "none: FP32, freezing, batch 1..256, BatchNorm folded, aot_compile + "
               "package_aoti (steps.optimize)", model=model, dtype="float32", options=shipped),
        Config("static-batch", "a static batch of 64", model=model, dtype="float32",
               options=shipped, dynamic=False),
        Config("one-call", "aoti_compile_and_package in one call", model=model,
               dtype="float32", options=shipped, path="compile_and_package"),
    ]  # fmt: skip
    if not quick:
        found += [
            Config("small-batch-program", "layout optimization off (the small-batch program)",
                   dtype="float32", options={**shipped, "layout_optimization": False}),
            Config("bf16", "BF16", dtype="bfloat16", options=shipped),
            Config("jit-cpp-wrapper", "torch.compile just in time with the C++ wrapper",
                   dtype="float32", options={**shipped, "cpp_wrapper": True}, path="jit"),
        ]  # fmt: skip
    return found


def unknown_options(config: Config) -> list[str]:
    """The options this torch's Inductor does not have (such a configuration is not run)."""
    return [key for key in config.options if not hasattr(torch._inductor.config, key)]


@dataclass
class Result:
    name: str
    differs: str
    status: str  # finished, failed, crashed, timed out, not run
    stage: str = ""
    seconds: float = 0.0
    compile_s: float | None = None
    max_abs_diff: float | None = None
    detail: str = ""


@dataclass
class Diagnosis:
    title: str
    results: list[Result] = field(default_factory=list)
    reproduction: str | None = None  # the script of the smallest configuration that crashed
    reproduces: str | None = None  # which configuration that is


def diagnose_one(config: Config, args, workdir: Path, limit_s: float, injected: str) -> Result:
    """Write the configuration's script and run it in a child of its own."""
    path = workdir / f"repro_{config.name}.py"
    path.write_text(script(config, args.device, injected))
    scratch = workdir / config.name
    scratch.mkdir()
    outcome = run_child([sys.executable, str(path), str(scratch)], limit_s, env=config.env)
    result = Result(config.name, config.differs, outcome.status, outcome.stage,
                    round(outcome.seconds, 1), detail=outcome.detail)  # fmt: skip
    found = [line for line in outcome.stdout.splitlines() if line.startswith(RESULT)]
    if outcome.finished and found:
        figures = json.loads(found[-1][len(RESULT) :])
        result.compile_s = round(figures["compile_s"], 1)
        result.max_abs_diff = figures["max_abs_diff"]
    return result


def run_all(configs: list[Config], args, workdir: Path, injections: dict[str, str]):
    """Every configuration the budget allows, ``--jobs`` at a time, in the list's order."""
    end = time.perf_counter() + args.budget_s
    scale = 10.0 if args.device == "cpu" else 1.0  # a CPU compiles slower

    def one(config: Config) -> Result:
        left = end - time.perf_counter()
        if missing := unknown_options(config):
            why = f"not in this torch: {', '.join(missing)}"
            return Result(config.name, config.differs, "not run", detail=why)
        if left < 10:
            return Result(config.name, config.differs, "not run", detail="time budget")
        kind = injections.get(config.name)
        limit = HANG_LIMIT_S if kind == "hang" else min(config.limit_s * scale, left)
        say(f"{config.name}: {config.differs}")
        result = diagnose_one(config, args, workdir, limit, INJECTED.get(kind or "", ""))
        say(f"{config.name}: {result.status} {result.stage} {result.detail}".rstrip())
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return list(pool.map(one, configs))


def reproduction(results: list[Result], configs: list[Config]) -> Config | None:
    """The smallest configuration that crashed: the tiny network first, then list order."""
    crashed = {r.name for r in results if r.status == "crashed"}
    candidates = [c for c in configs if c.name in crashed]
    return min(candidates, key=lambda c: c.model != "tiny", default=None)


def markdown(diagnosis: Diagnosis) -> str:
    header = ("| configuration | differs from what ships | outcome | stage | compile s "
              "| max abs diff vs eager fp32 | detail |")  # fmt: skip
    lines = [diagnosis.title, "", header, "|---|---|---|---|---:|---:|---|"]
    for r in diagnosis.results:
        compile_s = "" if r.compile_s is None else f"{r.compile_s:.1f}"
        diff = "" if r.max_abs_diff is None else f"{r.max_abs_diff:.2e}"
        stage = "" if r.status == "finished" else r.stage
        lines.append(f"| {r.name} | {r.differs} | {r.status} | {stage} | {compile_s} | {diff} "
                     f"| {r.detail} |")  # fmt: skip
    built = [r.name for r in diagnosis.results if r.status == "finished"]
    failed = [r.name for r in diagnosis.results if r.status in ("crashed", "failed", "timed out")]
    lines += ["", f"Built and ran: {', '.join(built) or 'none'}."]
    lines += [f"Crashed, failed or timed out: {', '.join(failed) or 'none'}."]
    if diagnosis.reproduction:
        lines += [f"Reproduction ({diagnosis.reproduces}): python3 {diagnosis.reproduction}"]
    return "\n".join(lines)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if present")
    parser.add_argument("--quick", action="store_true", help="CPU dry run: three small builds")
    parser.add_argument("--budget-s", type=float, default=210.0, help="seconds for them all")
    parser.add_argument("--jobs", type=int, help="children at once (default: 4 on a GPU, else 1)")
    parser.add_argument("--json", type=Path, help="also write FILE and FILE.md")
    parser.add_argument("--repro-dir", type=Path, help="where the reproduction goes (default .)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these configurations alone")
    parser.add_argument("--inject", action="append", default=[], help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("aoti_diagnose.py: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.jobs = args.jobs or (4 if args.device == "cuda" else 1)
    configs = gpu_configs() if args.device == "cuda" else cpu_configs(args.quick)
    names = [c.name for c in configs]
    injections = {}  # configuration name -> crash or hang
    for spec in args.inject:
        kind, _, name = spec.partition(":")
        injections[name] = kind
    if unknown := [n for n in [*(args.only or []), *injections] if n not in names]:
        print(f"aoti_diagnose.py: no configuration {unknown[0]!r}; there are: "
              f"{', '.join(names)}", file=sys.stderr)  # fmt: skip
        return 2
    configs = [c for c in configs if not args.only or c.name in args.only]
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    diagnosis = Diagnosis(f"AOTInductor diagnosis on {device}; torch {torch.__version__}, "
                          f"CUDA {torch.version.cuda}, {args.jobs} at a time")  # fmt: skip
    say(diagnosis.title)
    with tempfile.TemporaryDirectory(prefix="aoti-diagnose-") as workdir:
        diagnosis.results = run_all(configs, args, Path(workdir), injections)
        smallest = reproduction(diagnosis.results, configs)
        if smallest is not None:
            target = (args.repro_dir or Path.cwd()) / f"aoti_repro_{smallest.name}.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(workdir) / f"repro_{smallest.name}.py", target)
            diagnosis.reproduction, diagnosis.reproduces = str(target), smallest.name
    if args.json:
        args.json.write_text(json.dumps(asdict(diagnosis), indent=2))
        args.json.with_suffix(".md").write_text(markdown(diagnosis) + "\n")
    print(markdown(diagnosis), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
