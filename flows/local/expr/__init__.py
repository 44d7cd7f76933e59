"""Argo's ``{{=...}}`` expressions: the expr-lang subset, evaluated as Argo's controller does."""
