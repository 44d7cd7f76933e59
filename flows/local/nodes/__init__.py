"""The node tree of a local run: one node, DAG and steps templates, loops, the scheduling loop."""
