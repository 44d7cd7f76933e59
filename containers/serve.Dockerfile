# syntax=docker/dockerfile:1.7
# The serving image: python-slim + the [serve] extra (MLflow to load the champion pyfunc,
# ONNX Runtime and OpenVINO to run its variants, uvicorn). No torch: it serves a champion
# of portable variants (steps/common/serving), the InferenceService's predictor runs it; a
# champion of torch variants is served by cifar-optimize (the torch that built them).
#   docker build -f containers/serve.Dockerfile --build-arg VERSION=0.1.0 -t REGISTRY/cifar-serve:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY steps ./steps
COPY flows ./flows
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG VERSION
ARG REVISION=unknown
LABEL org.opencontainers.image.title="cifar-serve" \
      org.opencontainers.image.description="cifar-pipeline serving step: the champion pyfunc over HTTP (MLflow scoring protocol, KServe health probes)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/cifar-pipeline/cifar-pipeline"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
# Installing by version fails the build when VERSION is not the package version.
RUN pip install --no-cache-dir --find-links /wheels "cifar-pipeline[serve]==${VERSION}" && rm -rf /wheels \
    && useradd --create-home --uid 10001 pipeline
USER 10001
WORKDIR /home/pipeline
EXPOSE 8080
ENTRYPOINT []
# The registry's champion (MLFLOW_TRACKING_URI from the pod's env) on every interface, port
# serving.port (8080) unless PORT says otherwise; the InferenceService passes its own args.
CMD ["python", "-m", "steps.serve", "--host", "0.0.0.0", "--model-uri", "models:/cifar10-classifier@champion"]
