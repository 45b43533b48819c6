FROM python:3.11-slim

RUN apt-get update && apt-get install -y --no-install-recommends git tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 lucid

WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
COPY config ./config
COPY channels ./channels
COPY memory ./memory
COPY scheduler ./scheduler
COPY gateway ./gateway
RUN pip install --no-cache-dir -c requirements.lock .

USER lucid
ENV LITELLM_LOCAL_MODEL_COST_MAP=True \
    LUCIDGATE_CONFIG=/home/lucid/.lucidgate/config.json \
    LUCIDGATE_GATEWAY__HOST=0.0.0.0
VOLUME ["/home/lucid/.lucidgate"]
EXPOSE 18790
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["lucid", "gateway", "--log-format", "json"]
