#!/usr/bin/env bash
# Download the wheels scripts/gpu_check.sh needs on a GPU machine that has PyTorch but no SGLang and no network
# (the H200 image: Python 3.12, torch 2.11, transformers 5.17, no pydantic/fastapi/zmq/...): SGLang 0.5.23 slimmed
# (scripts/slim_wheel.py) plus the packages its server_args import and argument resolution load that the image
# lacks, transformers at the release's own 5.19.0. 40 wheels. Run from the repository root:
#   scripts/gpu_check_wheels.sh [DIR]     (default .whl; add DIR to .git/info/exclude)
# Then on the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site DIR/*.whl
#   export PYTHONPATH=/tmp/site:$PWD; bash scripts/gpu_check.sh
# The stages after the weights import the model runner and the speculative workers, which load openai (through
# the reasoning parser), xgrammar, soundfile and python-multipart too (a 2026-12-04 H200 run without them failed
# every configuration at the target's model config: "No module named 'openai'"). Left out on purpose (not loaded,
# checked with sys.modules after importing the runner, the workers and the model modules): jedi, parso,
# prompt_toolkit, wcwidth.
set -eu
DIR="${1:-.whl}"
mkdir -p "$DIR"
PACKAGES="annotated-types==0.8.0 apache-tvm-ffi==0.1.11 asttokens==3.0.2 compressed-tensors==0.18.0 dill==0.4.1
distro==1.9.0 executing==2.3.0 fastapi==0.165.0 gguf==0.19.0 ipython==9.18.1 ipython_pygments_lexers==1.1.1
loguru==0.7.3 matplotlib-inline==0.2.2 msgspec==0.23.0 opentelemetry-api==1.45.2 orjson==3.13.0
partial-json-parser==0.2.1.1.post7 pexpect==4.9.0 ptyprocess==0.7.0 pure_eval==0.2.4 pybase64==1.5.1
pydantic==2.14.4 pydantic_core==2.50.5 pyzmq==27.3.0 setproctitle==1.3.8 sniffio==1.3.1 stack-data==0.6.3
starlette==1.10.0 traitlets==5.16.1 typing-inspection==0.4.5 uvicorn==0.54.0 transformers==5.19.0
openai==2.8.0 jiter==0.19.0 python-multipart==0.0.34 xgrammar==0.2.7 soundfile==0.13.1 cffi==2.1.1 pycparser==3.12"
PLATFORMS="--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# shellcheck disable=SC2086  # both lists are meant to split
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
    -d "$DIR" $PACKAGES
TMP="$(mktemp -d)"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
    -d "$TMP" sglang==0.5.23
python3 "$(dirname "$0")/slim_wheel.py" "$TMP"/sglang-0.5.23-*.whl "$DIR"
rm -rf "$TMP"
du -sh "$DIR"
