#!/bin/sh
# Runs inside the stand-in image's chroot after its packages are installed; the wheels lie in /tmp/wheels.
set -eu
python3 -m pip install --no-index --find-links /tmp/wheels --no-cache-dir \
  --break-system-packages --root-user-action=ignore --disable-pip-version-check \
  -r /tmp/requirements.txt
python3 -m pip check
python3 -c "import torch, megatron.core, sentencepiece, tiktoken, tokenizers; print(\"torch\", torch.__version__)"
# torch's C++ unit-test binaries are not needed to run it (about 130 MiB)
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
rm -rf "${torch_dir}/test" "${torch_dir}"/bin/test_* "${torch_dir}"/bin/*Test
python3 -c 'import torch.distributed, megatron.core.parallel_state'
