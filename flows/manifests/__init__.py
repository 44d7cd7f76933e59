"""What the workflow carries to Kubernetes: pod environment, security and names; the jobs."""
