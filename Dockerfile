# lucidgate in a container. Everything it keeps (config.json + workspace) lives in the one
# volume at /home/lucid/.lucidgate; see deploy/docker-compose.yml for the hardened way to run it.
FROM python:3.11-slim-bookworm

# git: the memory history. tini: PID 1 that forwards signals (the gateway drains on SIGTERM).
# No compilers: every dependency installs from a wheel.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git=1:2.39.* tini=0.19.* \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 --user-group lucid \
    && install -d -o 1000 -g 1000 -m 0700 /home/lucid/.lucidgate

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1
WORKDIR /app

# Dependencies first, pinned by the same requirements.lock as .ci/run: this slow layer is
# rebuilt only when the lock or the dependency list changes, not on every code change.
COPY requirements.lock pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -c requirements.lock -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Then the code (tests and benchmarks stay out: see .dockerignore).
COPY README.md setup.py ./
COPY config ./config
COPY channels ./channels
COPY memory ./memory
COPY scheduler ./scheduler
COPY gateway ./gateway
RUN pip install --no-deps -c requirements.lock . \
    && rm -rf /app/build /app/*.egg-info

# A numeric user (DL3066): the volume above is created owned by it, so a fresh named
# volume is writable on the first run.
USER 1000:1000
ENV HOME=/home/lucid \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    LUCIDGATE_CONFIG=/home/lucid/.lucidgate/config.json \
    LUCIDGATE_GATEWAY__HOST=0.0.0.0
VOLUME ["/home/lucid/.lucidgate"]
EXPOSE 18790
# No curl in the image: the CLI asks /healthz itself.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["lucid", "healthcheck"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["lucid", "gateway", "--log-format", "json"]
