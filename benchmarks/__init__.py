"""Benchmarks: scripts that print a table (``python benchmarks/<name>.py``); not shipped.
A package, so ``from benchmarks.x import`` finds these files before any ``benchmarks``
package installed elsewhere on the path."""
