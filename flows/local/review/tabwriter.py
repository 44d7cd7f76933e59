"""Go's text/tabwriter, as the argo CLI aligns its tables with it (left-aligned, spaces,
a padding, no flags): each line is cells ended by tabs and a last cell after the last
tab; a column's width is set per block of consecutive lines that have a cell in it, so a
line with fewer cells (a header) ends the block, as Go's ``Writer.format`` does."""

from __future__ import annotations


def _width(cell: str) -> int:
    """A cell's width in runes; Go counts an escape sequence's bytes too, which the argo
    CLI evens out by wrapping every cell of a column in one (``ansiFormat``)."""
    return len(cell)


def tabulate(text: str, padding: int, minwidth: int = 0) -> str:
    """``text`` (lines of tab-separated cells) aligned as tabwriter.NewWriter(out,
    minwidth, 0, padding, ' ', 0) writes it."""
    lines = [line.split("\t") for line in text.split("\n")]
    out: list[str] = []
    _format(lines, 0, len(lines), [], padding, minwidth, out)
    return "\n".join(out)


def _format(
    lines: list[list[str]],
    line0: int,
    line1: int,
    widths: list[int],
    padding: int,
    minwidth: int,
    out: list[str],
) -> None:
    column = len(widths)
    this = line0
    while this < line1:
        if column >= len(lines[this]) - 1:
            this += 1
            continue
        _write(lines, line0, this, widths, out)  # the lines before this block
        line0 = this
        width = minwidth
        while this < line1 and column < len(lines[this]) - 1:
            width = max(width, _width(lines[this][column]) + padding)
            this += 1
        _format(lines, line0, this, [*widths, width], padding, minwidth, out)
        line0 = this
    _write(lines, line0, line1, widths, out)


def _write(
    lines: list[list[str]], line0: int, line1: int, widths: list[int], out: list[str]
) -> None:
    for cells in lines[line0:line1]:
        text = ""
        for j, cell in enumerate(cells):
            text += cell
            if j < len(widths) and j < len(cells) - 1:
                text += " " * (widths[j] - _width(cell))
        out.append(text)
