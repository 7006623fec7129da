# syntax=docker/dockerfile:1
# The gateway image (`llmgw serve`) and, as target `sim`, the simulator image for GPU-less pools.
#   docker build -t ghcr.io/llm-gateway/llm-gateway:0.2.0 --target runtime .
#   docker build -t ghcr.io/llm-gateway/llm-gateway-sim:0.2.0 --target sim .
# Stages: `build` installs the package into a venv (pip and any compiler stay here), `encoder`
# exports the router's int8 ONNX MiniLM (torch is needed only for that), `runtime` is a slim Python
# with the venv, the baked encoder and a non-root user; `sim` adds the eval package the gateway image
# leaves out (design §2: the production image does not carry evaluation code).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The whole context: .dockerignore is the one list of what goes in (docs/design/012-kubernetes.md);
# tests/chart/test_image_context.py builds and imports the package from exactly that context.
COPY . .
# The router's shipped artifacts are copied next to the installed package whatever the package-data
# globs cover (difficulty heads are .npz, answer scorers .json).
RUN python -m venv /opt/llmgw \
 && /opt/llmgw/bin/pip install --upgrade pip \
 && /opt/llmgw/bin/pip install . \
 && cp -r router/artifacts router/scorer_artifacts /opt/llmgw/lib/python3.11/site-packages/router/

FROM build AS encoder
# CPU-only torch: the default index would pull a multi-GB CUDA build. Build-time only.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN python -m venv /opt/export \
 && /opt/export/bin/pip install --index-url "$TORCH_INDEX" "torch==${TORCH_VERSION}" \
 && /opt/export/bin/pip install '.[router-build]' \
 && HF_HUB_OFFLINE=1 /opt/export/bin/python -m eval.routing.export_encoder --out /encoder/minilm-l6-v2-int8

FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/llmgw/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LLMGW_HOST=0.0.0.0 \
    LLMGW_PORT=8080
RUN groupadd --gid 10001 llmgw \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin llmgw
COPY --from=build /opt/llmgw /opt/llmgw
COPY --from=encoder /encoder/minilm-l6-v2-int8 /opt/llmgw/lib/python3.11/site-packages/router/assets/minilm-l6-v2-int8
# eval/ (simulator, benchmarks, training) is not part of the gateway image; `llmgw sim` lives in target sim.
RUN rm -rf /opt/llmgw/lib/python3.11/site-packages/eval \
 && /opt/llmgw/bin/python -c "import gateway.app, router.encoder; print('imports ok')"
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["llmgw"]
CMD ["serve"]

FROM runtime AS sim
COPY --from=build /opt/llmgw/lib/python3.11/site-packages/eval /opt/llmgw/lib/python3.11/site-packages/eval
EXPOSE 8000
CMD ["sim", "--host", "0.0.0.0", "--port", "8000"]
