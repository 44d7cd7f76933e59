"""Real servers on 127.0.0.1, one process group each: SeaweedFS S3 (``seaweedfs``) and
``mlflow server`` (``mlflow_server``), started by the tests' fixtures and by the
benchmarks that measure against the same servers; a pipeline run here can be pointed at
them (storage.endpoint_url, tracking.uri)."""
