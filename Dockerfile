# One image for the api, worker, beat and migrate services of docker-compose.yml.

# the admin UI's front-end libraries, from the npm registry (the same lock file as scripts/setup.sh)
FROM node:20-slim AS web
WORKDIR /web
COPY factloom/platform/web/package.json factloom/platform/web/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    FACTLOOM_HOME=/var/lib/factloom

WORKDIR /app

# dependencies first: this layer is rebuilt only when the pins change
COPY requirements.lock ./
RUN pip install -r requirements.lock

COPY pyproject.toml ./
COPY factloom ./factloom
COPY --from=web /web/node_modules ./factloom/platform/web/node_modules
COPY migrations ./migrations
COPY deploy ./deploy
# editable, like the local setup: the package finds migrations/ and deploy/ beside it in /app
RUN pip install --no-deps -e . \
    && useradd --system --create-home --home-dir /var/lib/factloom factloom

USER factloom
EXPOSE 8000
CMD ["uvicorn", "factloom.platform.app:app", "--host", "0.0.0.0", "--port", "8000"]
