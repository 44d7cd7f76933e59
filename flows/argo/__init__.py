"""The Argo client: where the Argo server is and whether it answers (``server``), a
template applied and a run submitted or scheduled (``submit``), a failed run submitted
again reusing what it did (``resubmit``)."""
