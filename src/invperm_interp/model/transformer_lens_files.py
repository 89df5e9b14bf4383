"""A TransformerLens model read back from the two files its user saved, without pickle.

``load_native(weights, config)`` reads the model back from the two files its user saved without
pickle: ``safetensors.torch.save_file(bridge.state_dict(), weights)`` and
``json.dump(bridge.cfg.to_dict(), open(config, "w"), default=str)``. It boots
``TransformerBridge.boot_native`` from the configuration (``TransformerBridgeConfig.from_dict``:
unknown keys are dropped; ``dtype`` may be the text ``"torch.float32"`` that ``default=str`` writes)
on the CPU and loads the weights strictly: every tensor the configuration makes, of its shape, and
nothing else. The state dict may be the bridge's (``blocks.0.attn.q.weight``) or a
``HookedTransformer``'s (``blocks.0.attn.W_Q``, converted with TransformerLens's
``convert_tl_checkpoint``). Only safetensors and JSON are read; each bad file is one ``ValueError``
naming the argument (``weights``, ``config``) and what was expected.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["PICKLE_SUFFIXES", "SAVE_HINT", "load_native", "read_native_config"]

#: Files that hold pickles, which are never read: a model saved so must be saved again.
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")
#: What the user runs to write the two files.
SAVE_HINT = ("save them with safetensors.torch.save_file(bridge.state_dict(), WEIGHTS) and "
             "json.dump(bridge.cfg.to_dict(), open(CONFIG, 'w'), default=str)")
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16}
_REQUIRED = ("d_model", "d_head", "n_layers", "n_ctx")
_PROPERTY_KEY = re.compile(r"\.(W|b)_[A-Za-z]+$")  # HookedTransformer's blocks.0.attn.W_Q, embed.W_E


def read_native_config(config: str | Path) -> dict:
    """The configuration file ``config`` (JSON, ``bridge.cfg.to_dict()``) as a dict, its ``dtype``
    a ``torch.dtype`` (default float32), its device the CPU."""
    path = _existing(config, "config", "a JSON file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"config {path} is not JSON ({err}); {SAVE_HINT}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config {path} must be a JSON object (bridge.cfg.to_dict()), got "
                         f"{type(data).__name__}; {SAVE_HINT}")
    missing = [k for k in _REQUIRED if not (type(data.get(k)) is int and data[k] > 0)]
    if missing:
        raise ValueError(f"config {path} must give {', '.join(_REQUIRED)} as integers > 0 (a "
                         f"TransformerLens configuration), lacks {missing}; {SAVE_HINT}")
    data["dtype"] = _dtype(data.get("dtype"), path)
    data["device"] = "cpu"
    if data.get("architecture") not in (None, "TransformerLensNative"):
        raise ValueError(f"config {path} is of architecture {data['architecture']!r}; the import "
                         f"reads TransformerLens's native models (architecture None or "
                         f"'TransformerLensNative', TransformerBridge.boot_native)")
    data["architecture"] = "TransformerLensNative"
    return data


def load_native(weights: str | Path, config: str | Path, dtype: torch.dtype | None = None):
    """The native ``TransformerBridge`` (eval mode, on the CPU) that ``config`` describes, holding
    the tensors of the safetensors file ``weights``, in ``dtype`` (default: the configuration's)."""
    from transformer_lens import TransformerBridge, TransformerBridgeConfig

    cfg = read_native_config(config)
    path = _existing(weights, "weights", "a safetensors file")
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise ValueError(f"weights {path} looks like a pickle ({path.suffix}), which is never read "
                         f"here; {SAVE_HINT}")
    dtype = dtype or cfg["dtype"]
    state = _read_safetensors(path)
    cfg = {**cfg, "dtype": dtype, "init_weights": False}
    try:
        bridge = TransformerBridge.boot_native(cfg, device="cpu", dtype=dtype)
    except (TypeError, ValueError, AssertionError) as err:
        raise ValueError(f"config {config} does not make a TransformerLens model: "
                         f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    if any(_PROPERTY_KEY.search(k) for k in state):  # a HookedTransformer's state dict
        from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

        try:
            state = convert_tl_checkpoint(state, TransformerBridgeConfig.from_dict(cfg))
        except (ValueError, KeyError) as err:
            raise ValueError(f"weights {path} (a HookedTransformer state dict) does not fit config "
                             f"{config}: {str(err).splitlines()[0]}") from None
        if "unembed.bias" in bridge.state_dict():  # HookedTransformer's b_U is often not saved
            state.setdefault("unembed.bias", torch.zeros(bridge.state_dict()["unembed.bias"].shape))
    _load_strict(bridge, state, path, config, dtype)
    return bridge.eval()


def _existing(value, name: str, kind: str) -> Path:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ValueError(f"{name} must be the path of {kind}, got {value!r}")
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"{name} {path} does not exist (expected {kind}); {SAVE_HINT}")
    return path


def _dtype(value, path: Path) -> torch.dtype:
    if value is None:
        return torch.float32
    if isinstance(value, torch.dtype):
        return value
    name = str(value).removeprefix("torch.")
    if name not in _DTYPES:
        raise ValueError(f"config {path}: dtype must be one of {sorted(_DTYPES)} (or "
                         f"'torch.float32' as default=str writes it), got {value!r}")
    return _DTYPES[name]


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises its own error type for a file it cannot parse
        raise ValueError(f"weights {path} is not a safetensors file ({str(err).splitlines()[0]}); "
                         f"{SAVE_HINT}") from None


def _load_strict(bridge, state: dict[str, Tensor], path: Path, config, dtype: torch.dtype) -> None:
    """``state`` into ``bridge``: the same names and shapes as its own state dict, else one line."""
    own = bridge.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(f"weights {path} do not fit config {config}: missing {missing[:4]}"
                         f"{' …' if len(missing) > 4 else ''}, unexpected {unexpected[:4]}"
                         f"{' …' if len(unexpected) > 4 else ''} (expected bridge.state_dict()'s "
                         f"names, e.g. {sorted(own)[:2]})")
    for name, t in state.items():
        if tuple(t.shape) != tuple(own[name].shape):
            raise ValueError(f"weights {path}: {name} has shape {tuple(t.shape)}, config {config} "
                             f"makes {tuple(own[name].shape)}")
    bridge.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
