"""The benchmark's outputs: ``report.md`` (a Markdown table per variant and batch size) and
``benchmark.png`` (latency and throughput against batch size, one line per variant),
both drawn from the report (``steps.common.contracts.benchmark``). Plots use matplotlib's Agg
backend."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from steps.common.contracts.benchmark import BenchmarkReport


def markdown(report: BenchmarkReport) -> str:
    env, settings = report.environment, report.settings
    lines = [
        "# Inference benchmark",
        "",
        f"- device: **{report.device_name}** ({report.device}), torch {env['torch']}, "
        f"torch-tensorrt {env['torch_tensorrt'] or 'not installed'}",
        f"- model: `{report.model_uri}` ({report.architecture}), "
        f"optimized: `{report.optimized_uri}`",
        f"- test images: {report.test_images} from `{report.dataset_uri}`",
        f"- timing: {settings['warmup_iters']} warm-up iterations and "
        f"{settings['warmup_s']:g} s at least, then at least "
        f"{settings['min_iters']} timed ones and until "
        f"{settings['time_budget_s']:g} s per cell ({settings['clock']}); "
        f"peak memory: {settings['memory_method']}",
    ]
    if report.load_average:
        lines.append(f"- load average at start: {report.load_average}")
    lines += [
        f"- best variant: **{report.best_variant}** (lowest p50 at batch "
        f"{report.gate_batch} among variants within the accuracy margin of eager)",
        "- fastest per batch size (what the dispatcher runs): "
        + ", ".join(f"{b}: {n}" for b, n in report.fastest_by_batch.items()),
        "",
        "| variant | precision | batch | p50 ms | p90 ms | p99 ms | images/s | vs eager | "
        "peak MB | accuracy |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, variant in report.measured.items():
        for batch, cell in variant.batches.items():
            lines.append(
                f"| {name} | {variant.precision} | {batch} | {cell.p50_ms:.3f} | "
                f"{cell.p90_ms:.3f} | {cell.p99_ms:.3f} | {cell.images_per_s:,.0f} | "
                f"{cell.speedup_vs_eager:.2f}x | {cell.peak_mem_mb:.1f} | "
                f"{variant.accuracy:.4f} |"
            )
    if report.not_measured:
        lines += ["", "Not measured:", ""]
        lines += [f"- {n}: {v.status}: {v.reason}" for n, v in report.not_measured.items()]
    if report.slower_than_eager:
        lines += ["", "Slower than eager somewhere: " + ", ".join(report.slower_than_eager)]
    promotion = report.promotion
    lines += ["", "## Registry", "", f"- {promotion.verdict()}"]
    if promotion.version:
        lines.append(f"- `{promotion.registered_model}` version {promotion.version}")
    return "\n".join(lines) + "\n"


def plot_png(report: BenchmarkReport) -> bytes:
    """Latency (p50, log-log) and throughput against batch size; PNG bytes."""
    fig = plot_figure(report)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _plain(value: float, _position: int) -> str:
    """``6``, ``20``, ``0.5``, ``12,000``: not matplotlib's ``6 x 10^0`` on log axes."""
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def _plain_log_axes(ax, batches: list[int]) -> None:
    """The measured batch sizes as the x ticks; 1-2-5 ticks in plain numbers on y."""
    ax.xaxis.set_major_locator(FixedLocator(batches))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_figure(report: BenchmarkReport):
    """The plot as a matplotlib figure (the caller closes it)."""
    fig, (lat_ax, thr_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, variant in report.measured.items():
        batches = list(variant.batches)
        cells = list(variant.batches.values())
        label = f"{name} ({variant.precision})"
        lat_ax.plot(batches, [c.p50_ms for c in cells], marker="o", label=label)
        thr_ax.plot(batches, [c.images_per_s for c in cells], marker="o", label=label)
    lat_ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="p50 latency (ms)")
    thr_ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="images/s")
    lat_ax.set_title("latency")
    thr_ax.set_title("throughput")
    batches = sorted({b for v in report.measured.values() for b in v.batches})
    for ax in (lat_ax, thr_ax):
        ax.grid(alpha=0.3, which="both")
        _plain_log_axes(ax, batches)
    thr_ax.legend(fontsize=8)
    fig.suptitle(f"{report.architecture} on {report.device_name}", fontsize=10)
    fig.tight_layout()
    return fig
