"""The script ``aoti_diagnose.py`` runs for one AOTInductor configuration, written out in
full: torch alone, the network's source inlined, the configuration's environment set
before torch is imported, a fresh Inductor cache (a cached kernel must not hide a crash).
A child runs exactly this file, so the one kept for a configuration that crashed is its
reproduction: ``python3 repro_NAME.py`` crashes the same way, anywhere this torch is.

It prints ``STAGE <name>`` as it enters each stage (export, compile, package, load, run)
and ``RESULT {json}`` at the end: the compile seconds and the largest logit difference
from eager FP32.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any

from steps.common.models import Residual, ResNet9, conv_bn

RESULT = "RESULT "


@dataclass(frozen=True)
class Config:
    """One configuration: what it changes from what ``steps.optimize`` ships, and how.

    ``path``: ``aot_compile`` (``torch._inductor.aot_compile`` then ``package_aoti``, as
    ``steps.optimize.builders`` does), ``compile_and_package`` (``aoti_compile_and_package``
    in one call) or ``jit`` (``torch.compile`` with these options: no AOT at all)."""

    name: str
    differs: str
    model: str = "resnet9"  # resnet9 (width 64) or tiny (one conv block and a linear)
    dtype: str = "float16"
    options: dict[str, Any] = field(default_factory=dict)
    dynamic: bool = True  # batch 1..256, example 64 (optimize.min/opt/max_batch)
    fold_batchnorm: bool = True
    path: str = "aot_compile"
    env: dict[str, str] = field(default_factory=dict)
    limit_s: float = 150.0


TINY = '''
class Tiny(nn.Module):
    """The smallest network with ResNet-9's parts: conv, BatchNorm, ReLU, pool, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveMaxPool2d(1),
                                   nn.Flatten())
        self.classifier = nn.Linear(16, 10, bias=False)

    def forward(self, x):
        return self.classifier(self.block(x))
'''

BODY = """
def stage(name):
    print("STAGE " + name, flush=True)


def main(workdir):
    device = torch.device(DEVICE)
    dtype = getattr(torch, DTYPE)
    torch.manual_seed(0)
    model = MODEL.to(device).eval()
    x = torch.randn(64, 3, 32, 32, device=device)
    with torch.no_grad():
        expected = model(x).float()
    stage("export")
    net = (fuse(copy.deepcopy(model)) if FOLD_BATCHNORM else model).to(dtype)
    dynamic = ({0: torch.export.Dim("batch", min=1, max=256)},) if DYNAMIC else None
    with torch.no_grad():
        exported = torch.export.export(net, (x.to(dtype),), dynamic_shapes=dynamic)
    stage("compile")
    INJECTED
    tic = time.perf_counter()
    package = os.path.join(workdir, "model.pt2")
    if PATH == "aot_compile":  # as steps.optimize.builders builds its packages
        try:
            module = exported.module(check_guards=False)
        except TypeError:  # releases before the flag
            module = exported.module()
        options = {**OPTIONS, "aot_inductor.package": True}
        files = torch._inductor.aot_compile(module, (x.to(dtype),), {}, options=options)
        stage("package")
        package_aoti(package, {"model": files})
        stage("load")
        runner = load_package(package, "model")
    elif PATH == "compile_and_package":
        torch._inductor.aoti_compile_and_package(
            exported, package_path=package, inductor_configs=OPTIONS
        )
        stage("load")
        runner = torch._inductor.aoti_load_package(package)
    else:  # Inductor just in time: the first call compiles
        runner = torch.compile(net, options=OPTIONS)
        with torch.no_grad():
            runner(x.to(dtype))
    compile_s = time.perf_counter() - tic
    stage("run")
    with torch.no_grad():
        runner(x[:1].to(dtype))
        logits = runner(x.to(dtype)).float()
    if device.type == "cuda":
        torch.cuda.synchronize()
    diff = (logits - expected).abs().max().item()
    print("RESULT " + json.dumps({"compile_s": compile_s, "max_abs_diff": diff}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="aoti-repro-"))
"""


def script(config: Config, device: str, injected: str = "") -> str:
    """The whole file for ``config`` on ``device``; ``injected`` (a test's crash or hang)
    runs as the compile stage starts."""
    if config.model == "tiny":
        model_source, model = TINY, "Tiny()"
    else:
        parts = (conv_bn, Residual, ResNet9)
        model_source = "\n\n".join(textwrap.dedent(inspect.getsource(p)) for p in parts)
        model = "ResNet9(10, 64).to(memory_format=torch.channels_last)"
    env = {"TORCHINDUCTOR_CACHE_DIR": "tempfile.mkdtemp(prefix='inductor-cache-')"}
    header = [
        f"# AOTInductor, configuration {config.name!r}: {config.differs}.",
        "# Written by benchmarks/aoti_diagnose.py; needs torch only: python3 THIS_FILE",
        "import os, tempfile",
        *(f"os.environ[{k!r}] = {v}" for k, v in env.items()),
        *(f"os.environ[{k!r}] = {v!r}" for k, v in config.env.items()),
        "import copy, json, sys, time",
        "import torch",
        "from torch import nn",
        "from torch.fx.experimental.optimization import fuse",
        "from torch._inductor.package import load_package, package_aoti",
        "",
        f"DEVICE = {device!r}",
        f"DTYPE = {config.dtype!r}",
        f"OPTIONS = {config.options!r}",
        f"DYNAMIC = {config.dynamic}",
        f"FOLD_BATCHNORM = {config.fold_batchnorm}",
        f"PATH = {config.path!r}",
    ]
    body = BODY.replace("MODEL.", f"{model}.").replace("INJECTED", injected or "pass")
    return "\n".join(header) + "\n\n" + model_source.strip() + "\n\n" + body
