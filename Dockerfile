# gangscale controller image: multi-stage, non-root, no build tools in the runtime stage.
#
#   docker build -t gangscale:dev .                        (add --build-arg EXTRAS=ray for Ray GCS reading)
#   docker run --rm gangscale:dev version
#
# The builder makes a wheel of the project and installs it, with its dependencies, into a virtualenv at
# /opt/gangscale; the runtime stage copies only that virtualenv. Both stages use the same base image, so the
# virtualenv's interpreter link (/usr/local/bin/python3.11) resolves in the runtime stage. The version lives
# in gangscale/__init__.py only (`docker run IMAGE version` prints it); tag the image with it.

FROM python:3.11-slim AS builder
# PIP_CONSTRAINT pins every package, build requirements included, to what CI tested (constraints.txt).
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_CONSTRAINT=/src/constraints.txt
WORKDIR /src
RUN python -m venv /opt/gangscale
# Only what the wheel build reads (pyproject names README.md as the long description).
COPY pyproject.toml README.md constraints.txt ./
COPY gangscale ./gangscale
# EXTRAS: optional extras of the package, e.g. --build-arg EXTRAS=ray for reading Ray heads' GCS (grpcio).
ARG EXTRAS=""
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && /opt/gangscale/bin/pip install --no-cache-dir "$(ls /wheels/*.whl)${EXTRAS:+[$EXTRAS]}" \
 && /opt/gangscale/bin/gangscale version

FROM python:3.11-slim AS runtime
LABEL org.opencontainers.image.title="gangscale" \
      org.opencontainers.image.description="Gang-aware, all-or-nothing node pool autoscaler for Kueue ProvisioningRequests" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/gangscale/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=builder /opt/gangscale /opt/gangscale
# 65532 is the conventional "nonroot" uid/gid; numeric, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["gangscale"]
CMD ["run", "--help"]
