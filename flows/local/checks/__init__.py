"""Up-front checks: what the local runner refuses, by name, before anything starts."""
