"""The command line of ``python flows/cifar.py``: its modes and exit codes (``main``), the
``serve`` verb, the local run (``run_here``, with ``reachable`` before it and ``hints``
after it); handed the pipeline's builders (``builders.Pipeline``), never importing them."""
