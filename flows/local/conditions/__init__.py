"""Whether a node runs: govaluate ``when``, enhanced ``depends``, Skipped and Omitted nodes."""
