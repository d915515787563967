# One image for every role: `docker run IMAGE rm|proxy|worker [flags]` (the first argument
# picks the role, as in Pathways' images). The runtime stage holds the stripped binary
# (installed by `cmake --install`), Debian's shared libraries it links, the CPU PJRT plugin,
# and a Python venv with jaxlib (the workers' custom-call kernels, --python) and the
# Switchyard client package. A GPU image adds its PJRT plugin on top and points
# --pjrt_plugin (or SWITCHYARD_PJRT_PLUGIN) at it.
#
#   podman build -t switchyard:0.1.0 .        (or docker build / buildah bud)
#
# Behind a TLS-intercepting proxy, mount its CA bundle and name it for pip:
#   podman build -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro \
#     --build-arg PIP_CERT=/run/host-ca.crt -t switchyard:0.1.0 .
ARG DEBIAN=bookworm
# Debian 12's Python is 3.11: jaxlib 0.10.2 is the newest release for it. The build takes
# XLA's FFI headers from it; the workers register its kernels, which serve clients of 0.10
# to 0.12 (the custom-call targets are the same).
ARG JAX_VERSION=0.10.2

FROM debian:${DEBIAN} AS build
ARG PIP_CERT
ARG JAX_VERSION
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config libgrpc++-dev protobuf-compiler-grpc \
      libprotobuf-dev protobuf-compiler libabsl-dev libcpp-httplib-dev libssl-dev \
      python3 python3-venv ca-certificates && rm -rf /var/lib/apt/lists/*
# The PJRT C API header (xla-cpu-pjrt), XLA's FFI headers (jaxlib) and the CPU plugin come
# from their wheels.
COPY python/requirements.txt /src/python/requirements.txt
RUN python3 -m venv /venv && /venv/bin/pip install -q --no-cache-dir --no-deps \
      $(grep -E '^(xla-cpu-pjrt|lammps-jax-pjrt-cpu)==' /src/python/requirements.txt) \
      jaxlib==${JAX_VERSION} && \
    /venv/bin/pip install -q --no-cache-dir "setuptools>=68" grpcio-tools==1.76.0
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSWITCHYARD_BUILD_TESTS=OFF -DSWITCHYARD_VENV=/venv && \
    ninja -C /build switchyard && \
    cmake --install /build --strip --prefix /opt/switchyard && \
    mkdir -p /opt/switchyard/pjrt && \
    cp "$(/venv/bin/python -c 'import lammps_jax_pjrt_cpu as p; print(p.PLUGIN_PATH)')" \
       /opt/switchyard/pjrt/pjrt_c_api_cpu_plugin.so && \
    cd /src && /venv/bin/pip wheel -q --no-cache-dir --no-deps --no-build-isolation -w /wheels .

# libpython: the workers embed the venv's Python to register jaxlib's kernels.
FROM debian:${DEBIAN}-slim AS runtime
ARG PIP_CERT
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libabsl20220623 libc-ares2 libcpp-httplib0.11 libgrpc++1.51 libgrpc29 libprotobuf32 \
      libre2-9 libssl3 python3 python3-venv libpython3.11 ca-certificates tini && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/switchyard /opt/switchyard
COPY --from=build /wheels /tmp/wheels
ARG JAX_VERSION
RUN python3 -m venv /opt/switchyard/venv && \
    /opt/switchyard/venv/bin/pip install -q --no-cache-dir /tmp/wheels/*.whl \
      jax==${JAX_VERSION} jaxlib==${JAX_VERSION} && \
    rm -rf /tmp/wheels && \
    useradd --uid 1000 --user-group --no-create-home --home-dir /tmp switchyard
ENV PATH=/opt/switchyard/bin:/opt/switchyard/venv/bin:$PATH \
    SWITCHYARD_PJRT_PLUGIN=/opt/switchyard/pjrt/pjrt_c_api_cpu_plugin.so \
    SWITCHYARD_WORKER_PYTHON=/opt/switchyard/venv/bin/python
USER 1000:1000
EXPOSE 29000 29001 29005
# tini reaps the workers' helper processes and passes SIGTERM on for an orderly stop.
ENTRYPOINT ["/usr/bin/tini", "--", "switchyard"]
CMD ["--help"]
