"""Hold vLLM's weight loading until `dgem stage` has finished (serving.md §10.1 step 3).

The entrypoint puts this directory on PYTHONPATH when it stages weights into
DGEM_STAGE_DIR. vLLM then runs its whole Python/Torch/CUDA initialization in
parallel with the download and blocks only right before reading tensors, until
DGEM_STAGE_DIR/.ready exists (written by `dgem stage` after every file is verified).
"""

import os
import time

_DIR = os.environ.get("DGEM_STAGE_DIR", "")
_READY = os.path.join(_DIR, ".ready") if _DIR else ""
_TIMEOUT_S = float(os.environ.get("DGEM_STAGE_WAIT_S", "1800"))


def _wait_for_ready():
    deadline = time.monotonic() + _TIMEOUT_S
    while not os.path.exists(_READY):
        if time.monotonic() > deadline:
            raise RuntimeError(f"weights not staged after {_TIMEOUT_S:.0f} s: {_READY} missing")
        time.sleep(0.2)


def _patch():
    try:
        from vllm.model_executor.model_loader import default_loader
    except Exception:  # vLLM not importable in this interpreter: nothing to hold.
        return
    loader = default_loader.DefaultModelLoader
    original = loader.load_weights

    def load_weights(self, model, model_config, *args, **kwargs):
        if str(getattr(model_config, "model", "")).startswith(_DIR):
            _wait_for_ready()
        return original(self, model, model_config, *args, **kwargs)

    loader.load_weights = load_weights


if _READY:
    _patch()
