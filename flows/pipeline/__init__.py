"""The pipeline's definition, less its DAG (flows/cifar.py): its parameters, the workflow's
spec, and one module per template family (``*_template(s)``), with the memo keys and the
reuse checks they share."""
