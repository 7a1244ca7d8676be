#!/bin/sh
# Runs inside the stand-in image's chroot after its packages are installed; the wheels lie in /tmp/wheels.
set -eu
python3 -m pip install --no-index --find-links /tmp/wheels --no-cache-dir \
  --break-system-packages --root-user-action=ignore --disable-pip-version-check \
  -r /tmp/requirements.txt
python3 -m pip check
python3 -c "import torch, megatron.core, sentencepiece, tiktoken, tokenizers, transformers; print(\"torch\", torch.__version__)"
python3 -c "from torch.utils.tensorboard import SummaryWriter"
# torch's C++ unit-test binaries are not needed to run it (about 130 MiB)
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
rm -rf "${torch_dir}/test" "${torch_dir}"/bin/test_* "${torch_dir}"/bin/*Test
python3 -c 'import torch.distributed, megatron.core.parallel_state'

# With a Megatron-LM tree (build-images.sh copies third_party/Megatron-LM to /home/Megatron-LM): its training
# code importable, and its megatron.core the same version as the wheel's. Its dataset helpers are NOT built, as
# in an image whose Megatron tree was copied in unbuilt: the CPU patch, as the vendor's musa_patch, makes
# Megatron's runtime compile a no-op, so provision.yml must build them (roles/dataset_helpers).
tree=/home/Megatron-LM
if [ -f "${tree}/pretrain_gpt.py" ]; then
  wheel=$(cd / && python3 -c 'import megatron.core; print(megatron.core.__version__)')
  cd "${tree}"
  PYTHONDONTWRITEBYTECODE=1 python3 -W ignore -c '
import megatron.core, megatron.training.training, psutil
import megatron.core.models.gpt, megatron.legacy.model
assert megatron.core.__file__.startswith("/home/Megatron-LM/"), megatron.core.__file__
try:
    import megatron.core.datasets.helpers_cpp
except ImportError:
    pass
else:
    raise SystemExit("the dataset helpers are built in the image; the stand-in must ship them unbuilt")
print("Megatron-LM tree: megatron.core", megatron.core.__version__)
'
  tree_version=$(PYTHONDONTWRITEBYTECODE=1 python3 -c 'import megatron.core; print(megatron.core.__version__)' 2>/dev/null)
  [ "${tree_version}" = "${wheel}" ] || { echo "tree's megatron.core ${tree_version} != wheel's ${wheel}"; exit 1; }
  test -f "${tree}/LICENSE"
fi
