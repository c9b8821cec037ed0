# syntax=docker/dockerfile:1
#
# The tidings image: the `tidings` command with the project and its examples installed.
#
#   docker build -t tidings:dev .
#   docker run --rm -e TIDINGS_BOOTSTRAP=kafka:9092 tidings:dev worker examples.bank.app:app
#
# Two stages: the first installs the project with its tracing extra (`pip install
# '.[tracing]'`: off until OTEL_* says where traces go, docs/tracing.md) into a virtualenv, the second
# copies only that virtualenv and the examples onto a clean python:3.11-slim, so neither the
# sources nor pip's build artefacts end up in the image. Every dependency ships manylinux
# wheels for CPython 3.11, so no compiler is needed.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/tidings
ENV PATH=/opt/tidings/bin:$PATH
WORKDIR /src
# .dockerignore lets in only pyproject.toml, setup.py, README.md, platform/, schemas/,
# topics/ and examples/.
COPY . .
RUN pip install --upgrade pip setuptools wheel \
    && pip install '.[tracing]' \
    && tidings --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="tidings" \
      org.opencontainers.image.description="Event-sourced aggregates, sagas and durable workflows on Apache Kafka"

# A fixed, numeric, non-root uid/gid, so Kubernetes' runAsNonRoot can check it and fsGroup
# can match it.
ARG UID=10001
ARG GID=10001
RUN groupadd --system --gid "${GID}" tidings \
    && useradd --system --uid "${UID}" --gid "${GID}" --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin tidings \
    && mkdir -p /var/lib/tidings \
    && chown "${UID}:${GID}" /var/lib/tidings

COPY --from=build /opt/tidings /opt/tidings
# The examples are not part of the wheel: they are importable from /app (PYTHONPATH), as
# `tidings worker examples.bank.app:app` expects. Owned by root, so the worker cannot alter
# its own code.
COPY examples /app/examples

ENV PATH=/opt/tidings/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TIDINGS_DATA_DIR=/var/lib/tidings

WORKDIR /app
USER ${UID}:${GID}
# RocksDB state: a cache rebuilt from Kafka, kept on a volume to save the rebuild on restart.
VOLUME ["/var/lib/tidings"]

# Exec form: tidings is PID 1 and receives SIGTERM itself, so a stop leaves the consumer group
# cleanly instead of waiting for the session timeout.
ENTRYPOINT ["tidings"]
CMD ["--help"]
