# syntax=docker/dockerfile:1
# The gpufleet image: the controller and the agent (`gpufleet controller`, `gpufleet agent`).
# Build it with `make image`: the tag is the project's version, the one `gpufleet install`
# refers to. tests/deploy/test_image.py checks this file against the install manifests.
ARG PYTHON_VERSION=3.11

# Build: the project's wheel and wheels of its pinned dependencies.
FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --wheel-dir /wheels .

# Runtime: the wheels installed (never the source tree), no compiler, no pip cache, not root.
FROM python:${PYTHON_VERSION}-slim
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels gpufleet
# The numeric user the manifests' securityContext runs as (runAsNonRoot, runAsUser).
USER 65532:65532
ENTRYPOINT ["gpufleet"]
CMD ["--help"]
