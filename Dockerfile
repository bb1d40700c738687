# The service image: the core packages only (no torch), run as an unprivileged user.
# Build: docker build -t ui-s1 .    Run: docker run --rm ui-s1 --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY requirements/core.lock requirements/core.lock
RUN pip install -r requirements/core.lock

COPY pyproject.toml README.md ./
COPY agent agent
COPY devices devices
COPY serve serve
COPY train train
RUN pip install --no-deps . && useradd --create-home --uid 10001 uis1

USER uis1
ENTRYPOINT ["uis1"]
CMD ["--help"]
