"""A pod's template as a local process: container, script, jobs, services, retries, outputs."""
