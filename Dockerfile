# syntax=docker/dockerfile:1
#
# The trial-runner image: what every pod of a sweep's Indexed Job runs.
# Each pod reads its index from JOB_ID (set by the Job from the completion-index
# annotation) and the storage URL from SWEEPER_STORAGE (a secretKeyRef), then
# `python -m trial_runner` runs that index against the study.
#
#   docker build -t sweeper-trial-runner:0.1.0 .
#
# (sweeper-trial-runner:0.1.0 is the spec's default `kubernetes.image`; push it
# to a registry the cluster can pull from and name that reference in the spec.)

# PyTorch's official CUDA runtime image, pinned to an exact tag. Its torch must be
# the version setup.cfg pins (torch==2.13.0); CUDA 13.0 is the build PyPI's
# torch 2.13.0 wheels use, and the runtime flavour has no compiler toolchain
# (smaller). Needs an NVIDIA driver that supports CUDA 13.0 on GPU nodes. For
# fully reproducible builds also pin the digest:
#   --build-arg BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime@sha256:<digest>
# with the digest from `docker buildx imagetools inspect` of that tag.
#
# BASE_IMAGE and WITH_TORCH exist for the local test cluster (tools/cluster/images.sh):
# it builds this file on a Debian base with WITH_TORCH=0, so the test image stays small
# (the tests run torch on the host and on GPU machines, not in pods). Users keep the
# defaults; the steps below are the same for both, only the base and torch differ.
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
FROM ${BASE_IMAGE}

# 1: torch comes from the base image and is kept (the default); 0: no torch at all.
ARG WITH_TORCH=1

# PIP_BREAK_SYSTEM_PACKAGES: Debian's python (the test image's base) refuses pip installs
# into the system interpreter (PEP 668) unless told otherwise; the CUDA image's python is
# conda's, which has no such marker, so there the variable changes nothing. A venv would
# work too (with --system-site-packages to see the base's torch), but it would change the
# interpreter users get on the CUDA image; this keeps their image exactly as it was. On
# Debian pip installs into /usr/local and leaves the few dpkg-owned modules alone.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /app

# Dependencies first, in their own layer, so a code change does not reinstall them.
# Torch is already in the base image (a CUDA build, several GB) and must stay
# exactly that build: a plain `pip install .` could replace it with a different
# wheel from PyPI (CPU-only or another CUDA) if any requirement disagreed with it.
# So the installed torch version is written to a constraint file: pip then keeps
# the base's torch, since it already satisfies both the pin and the constraint,
# and fails the build loudly (instead of downloading another torch) if setup.cfg
# and the base image ever disagree. The other dependencies come from setup.cfg's
# install_requires, the single source of truth. With WITH_TORCH=0 the torch line
# is dropped from them and the constraint file stays empty.
COPY setup.cfg pyproject.toml README.md ./
RUN if [ "$WITH_TORCH" = 1 ]; then \
        python -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" \
            > /tmp/torch-constraint.txt; \
    else \
        : > /tmp/torch-constraint.txt; \
    fi \
 && python -c "import configparser, re, sys; c = configparser.RawConfigParser(); c.read('setup.cfg'); \
reqs = [r.strip() for r in c['options']['install_requires'].splitlines() if r.strip()]; \
keep = [r for r in reqs if sys.argv[1] == '1' or re.split(r'[^A-Za-z0-9._-]', r)[0].lower() != 'torch']; \
print('\\n'.join(keep))" "$WITH_TORCH" \
        > /tmp/requirements.txt \
 && python -m pip install --no-cache-dir --constraint /tmp/torch-constraint.txt --requirement /tmp/requirements.txt \
 && if [ "$WITH_TORCH" = 1 ]; then \
        python -c "import torch; assert torch.version.cuda, 'torch was replaced by a CPU-only build'"; \
    else \
        python -c "import importlib.util as u; assert u.find_spec('torch') is None, 'torch is installed'"; \
    fi

# The package itself. --no-deps: every dependency is installed above, so this
# step cannot touch torch (or anything else) whatever pip's resolver would do.
COPY sweeper ./sweeper
COPY trial_runner ./trial_runner
RUN python -m pip install --no-cache-dir --no-deps . \
 && rm -rf build ./*.egg-info \
 && if [ "$WITH_TORCH" = 1 ]; then \
        python -c "import importlib.metadata as m; assert 'torch==' + m.version('torch') == open('/tmp/torch-constraint.txt').read().strip()"; \
    fi \
 && python -c "import trial_runner, sweeper"

# Run as an unprivileged user with a fixed numeric uid, so Kubernetes'
# runAsNonRoot can verify it and the restricted Pod Security Standard admits the
# pod. /app stays root-owned and read-only to the runner; HOME is writable for
# caches (torch, matplotlib). Under readOnlyRootFilesystem, mount an emptyDir
# on /home/sweeper (and /tmp).
RUN groupadd --system --gid 10001 sweeper \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/sweeper --create-home \
        --shell /usr/sbin/nologin sweeper
ENV HOME=/home/sweeper
USER 10001:10001

ENTRYPOINT ["python", "-m", "trial_runner"]
