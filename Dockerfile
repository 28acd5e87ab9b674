# wheelq's container image: one image for every role, `wheelq` as the entry point
# (docs/operations/deploying.md, "The image").
#
#     docker build -t wheelq .
#     docker run --rm wheelq scheduler --redis-url redis://redis:6379/0 --metrics-port 9100
#
# BASE is any Debian-like image with Python >= 3.11 on PATH as `python` and pip usable as
# root: python:3.11-slim by default; .ci/container-base makes one from Debian's packages
# where no image registry is reachable. PIP_INDEX_URL names another package index.
ARG BASE=python:3.11-slim

# --- stage 1: wheelq's wheel and every dependency's, in a virtual environment ------------
FROM ${BASE} AS build
ARG PIP_INDEX_URL=https://pypi.org/simple
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore \
    PIP_INDEX_URL=${PIP_INDEX_URL}
WORKDIR /src
# The dependencies first, in a layer of their own: a change to wheelq's code reuses it.
COPY pyproject.toml README.md ./
COPY wheelq/__init__.py wheelq/__init__.py
RUN python -m pip wheel --quiet --wheel-dir /wheels ".[all]" && rm /wheels/wheelq-*.whl
COPY wheelq wheelq
RUN python -m pip wheel --quiet --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/wheelq \
 && /opt/wheelq/bin/pip install --quiet --no-index --find-links /wheels "wheelq[all]" \
 && /opt/wheelq/bin/pip uninstall --quiet -y pip setuptools

# --- stage 2: the runtime: the base, the environment, a user; no compiler, pip or cache --
FROM ${BASE}
# No pip (nor ensurepip and its bundled wheels): nothing is installed at run time.
RUN set -eu; \
    where=$(python -c "import importlib.util as u, os; s = u.find_spec('pip'); print(os.path.dirname(s.origin) if s else '')"); \
    if [ -n "$where" ]; then rm -rf "$where" "$where"-*.dist-info; fi; \
    rm -rf /usr/local/bin/pip* /usr/bin/pip* /usr/local/lib/python3*/ensurepip \
      /usr/lib/python3*/ensurepip /usr/share/python-wheels /root/.cache; \
    groupadd --gid 10001 wheelq; \
    useradd --no-log-init --uid 10001 --gid 10001 --home-dir /home/wheelq --create-home \
      --shell /usr/sbin/nologin wheelq; \
    mkdir -p /app
COPY --from=build /opt/wheelq /opt/wheelq
COPY deploy/healthcheck.py /opt/wheelq/healthcheck.py
# PYTHONDONTWRITEBYTECODE: the modules are compiled already, and the root file system may
# be read-only (Kubernetes' readOnlyRootFilesystem).
ENV PATH=/opt/wheelq/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Your handlers' modules: `wheelq worker` imports them from the working directory.
WORKDIR /app
USER 10001:10001
# 8080: `wheelq serve`; 9100: the metrics, /healthz and /readyz of the other roles
# (--metrics-port 9100), which the health check asks.
EXPOSE 8080 9100
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "/opt/wheelq/healthcheck.py"]
ENTRYPOINT ["wheelq"]
CMD ["--help"]
