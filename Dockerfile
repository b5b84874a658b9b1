# One image for every process of a loomtune cluster (docker-compose.yml):
# `loomtune db upgrade && loomtune serve` and `loomtune worker ...`.
# See docs/cluster.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what the package is built from (tests, benchmarks and examples stay out).
COPY pyproject.toml README.md ./
COPY ir ir
COPY frontend frontend
COPY codegen codegen
COPY tuner tuner
COPY workers workers
COPY service service
COPY migrations migrations
COPY loomtune loomtune
RUN pip install . \
    && rm -rf /src \
    && useradd --create-home --uid 1000 loomtune \
    && mkdir -p /var/lib/loomtune \
    && chown loomtune /var/lib/loomtune

# Not root; /var/lib/loomtune holds the worker token compose's `worker-token` step writes.
USER loomtune
WORKDIR /home/loomtune
EXPOSE 8000
CMD ["loomtune", "--help"]
