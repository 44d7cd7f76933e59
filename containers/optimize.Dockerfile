# syntax=docker/dockerfile:1.7
# The optimize/benchmark image: NVIDIA's PyTorch container, which carries TensorRT and a
# torch-tensorrt built for its torch, plus the C++ toolchain AOTInductor compiles with. It
# also serves a champion of torch variants (the InferenceService's predictor then runs it).
#   docker build -f containers/optimize.Dockerfile --build-arg VERSION=0.1.0 -t REGISTRY/cifar-optimize:0.1.0 .
ARG NGC_IMAGE=nvcr.io/nvidia/pytorch:25.10-py3

FROM ${NGC_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY steps ./steps
COPY flows ./flows
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${NGC_IMAGE}
ARG VERSION
ARG REVISION=unknown
LABEL org.opencontainers.image.title="cifar-optimize" \
      org.opencontainers.image.description="cifar-pipeline TorchScript/export/AOTInductor/TensorRT and benchmark steps" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/cifar-pipeline/cifar-pipeline"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /wheels /wheels
# NGC's torch and torch-tensorrt are kept: pip only adds what the [train], [onnx] and
# [openvino] extras lack (ONNX Runtime, OpenVINO and NNCF for the CPU variants), and the
# [tensorrt] extra's ModelOpt for TensorRT INT8 (its torch-tensorrt pin is NGC's already).
# [serve] (uvicorn, httptools, uvloop, pysimdjson): this image also serves a champion of
# torch variants (steps.serve), which load only with the torch that built them.
# Installing by version fails the build when VERSION is not the package version.
RUN pip install --no-cache-dir --find-links /wheels "cifar-pipeline[train,onnx,openvino,serve]==${VERSION}" \
      "nvidia-modelopt>=0.47,<0.48" "huggingface-hub>=0.30" && rm -rf /wheels \
    && useradd --create-home --uid 10001 pipeline
USER 10001
WORKDIR /home/pipeline
ENTRYPOINT []
CMD ["python", "-m", "steps.optimize", "--help"]
