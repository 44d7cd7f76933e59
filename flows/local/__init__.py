"""The local runner: an Argo Workflow run on this machine, its templates as processes."""
