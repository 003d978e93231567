"""YAML run configs for ``clinrel infer segment`` and ``clinrel infer probe``.

A config is read and checked completely before any model work (the MONAI-bundle habit):
unknown keys, wrong types and missing files raise :class:`ConfigError`, whose message
names the config file, the key and the fix. The validated config is a plain nested dict
with every default filled in; :func:`config_hash` hashes its canonical JSON form and the
hash goes into every ``run_manifest.json``.

Segment config (``run.yaml``)::

    cases: cases.csv            # CSV: case_id, image (NIfTI file or DICOM folder), ...
    output: out/segment         # folder for cases.parquet, parts/, run_manifest.json
    model: my_unet              # the 'model' column of the cases table
    seed: 0
    device: auto                # auto | cpu | cuda
    amp: true                   # mixed precision on CUDA
    transforms:
      orientation: RAS          # or null
      spacing: [1.5, 1.5, 2.0]  # mm, or null (keep the native grid)
      window: [-100, 240]       # intensity window -> [0, 1], or null
    network:
      name: unet                # unet | segresnet
      weights: model.pt         # a .pt file, a MONAI bundle folder, or null (random init)
      in_channels: 1
      out_channels: 2
      kwargs: {channels: [8, 16, 32], strides: [2, 2]}
    inference:
      roi_size: [96, 96, 96]
      sw_batch_size: 2
      overlap: 0.25
      tumour_channel: 1
      activation: softmax       # softmax | sigmoid
      threshold: 0.5
      min_component_voxels: 10
      connectivity: 1
      hit_rule: iou             # lesion matching: iou | dice (>= min_overlap) | centroid
      min_overlap: 0.1

Probe config (``probe.yaml``)::

    output: out/probe
    seed: 0
    seeds: [0, 1, 2]
    datasets:                  # each a CSV: case_id, image (2D .npy/.png or 3D NIfTI), label
      - {name: ct_axial, cases: axial.csv, shift_sites: [site_12]}
    encoders:
      - {name: resnet10_rand, kind: resnet, depth: last}
      - {name: resnet18_rand, kind: resnet18, depths: [mid, last]}   # depth as a factor
      - {name: hist, kind: handcrafted}
    label_fractions: [0.01, 0.1, 0.5, 1.0]
    perturbations: [blur, jpeg, contrast, noise, crop]
    severities: [1, 2, 3]
    test_fraction: 0.3
    image_size: 32
    adapt:                     # the adapted regime: LoRA adapters on the encoder's layers
      enabled: false           # true: every run again with regime adapted, protocol lora
      rank: 4                  # LoRA rank r
      alpha: 8                 # LoRA scaling alpha (the update is scaled by alpha / r)
      steps: 40                # Adam steps (mini-batches of batch_size training images)
      lr: 0.003
      batch_size: 256
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A run config is invalid. The message names the file, the key and the fix."""


MSG_KEY = "{file}: key '{key}' {problem}; {fix}"

SEGMENT_DEFAULTS: dict[str, Any] = {
    "cases": None,
    "output": None,
    "model": "model",
    "seed": 0,
    "device": "auto",
    "amp": True,
    "transforms": {"orientation": "RAS", "spacing": None, "window": None},
    "network": {"name": "unet", "weights": None, "in_channels": 1, "out_channels": 2,
                "kwargs": {}},
    "inference": {"roi_size": [96, 96, 96], "sw_batch_size": 2, "overlap": 0.25,
                  "tumour_channel": 1, "activation": "softmax", "threshold": 0.5,
                  "min_component_voxels": 10, "connectivity": 1,
                  # the lesion matching (a case list with a 'reference' mask column):
                  # iou | dice (>= min_overlap) | centroid (inside the reference)
                  "hit_rule": "iou", "min_overlap": 0.1},
}

PROBE_DEFAULTS: dict[str, Any] = {
    "output": None,
    "seed": 0,
    "seeds": [0, 1, 2],
    "datasets": None,
    "encoders": [{"name": "handcrafted", "kind": "handcrafted"},
                 {"name": "resnet10_rand", "kind": "resnet", "depth": "last"}],
    "label_fractions": [0.01, 0.1, 0.5, 1.0],
    "perturbations": ["blur", "jpeg", "contrast", "noise", "crop"],
    "severities": [1, 2, 3],
    "test_fraction": 0.3,
    "image_size": 32,
    "device": "auto",
    "adapt": {"enabled": False, "rank": 4, "alpha": 8.0, "steps": 40, "lr": 0.003,
              "batch_size": 256},
}
DATASET_DEFAULTS: dict[str, Any] = {"name": None, "cases": None, "shift_sites": []}
ENCODER_DEFAULTS: dict[str, Any] = {"name": None, "kind": None, "depth": "last",
                                    "depths": None, "weights": None, "width": 8}

NETWORKS = ("unet", "segresnet")
ENCODER_KINDS = ("handcrafted", "resnet", "resnet18", "densenet", "cnn")
DEPTHS = ("last", "mid")
PERTURBATIONS = ("blur", "jpeg", "contrast", "noise", "crop")


def _err(file, key, problem, fix) -> ConfigError:
    return ConfigError(MSG_KEY.format(file=file, key=key, problem=problem, fix=fix))


def _merge(user: Mapping, defaults: Mapping, *, file: str, prefix: str = "",
           free: tuple[str, ...] = ()) -> dict:
    """Defaults overlaid with ``user``; unknown keys raise (except under ``free`` keys)."""
    if not isinstance(user, Mapping):
        raise _err(file, prefix.rstrip(".") or "<top>", f"must be a mapping, got {type(user).__name__}",
                   "write it as 'key: value' lines")
    out = copy.deepcopy(dict(defaults))
    for key, value in user.items():
        full = f"{prefix}{key}"
        if key not in defaults:
            raise _err(file, full, "is not a known key",
                       f"remove it or use one of {sorted(defaults)}")
        if isinstance(defaults[key], Mapping) and key not in free and value is not None:
            out[key] = _merge(value, defaults[key], file=file, prefix=f"{full}.", free=free)
        else:
            out[key] = value
    return out


def _read_yaml(path) -> tuple[dict, str]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found; check the path")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc}); fix the syntax") from exc
    if data is None:
        data = {}
    return data, str(path)


def _int(cfg, key, file, *, lo=None, hi=None, name=None):
    name = name or key
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo) or (
            hi is not None and v > hi):
        rng = f" in [{lo}, {hi if hi is not None else 'inf'}]" if lo is not None else ""
        raise _err(file, name, f"must be a whole number{rng}; got {v!r}", "write e.g. 0")
    return v


def _number(v, file, key, *, lo=None, hi=None, open_lo=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(file, key, f"must be a number; got {v!r}", "write a number such as 0.5")
    if lo is not None and (v < lo or (open_lo and v == lo)):
        raise _err(file, key, f"must be {'>' if open_lo else '>='} {lo}; got {v!r}", "change it")
    if hi is not None and v > hi:
        raise _err(file, key, f"must be <= {hi}; got {v!r}", "change it")
    return float(v)


def _choice(v, choices, file, key):
    if v not in choices:
        raise _err(file, key, f"must be one of {list(choices)}; got {v!r}", "pick one of those")
    return v


def _num_list(v, file, key, *, length=None, allow_none=True, positive=False):
    if v is None and allow_none:
        return None
    if not isinstance(v, (list, tuple)) or (length is not None and len(v) != length) or not v:
        n = f"{length} " if length else ""
        raise _err(file, key, f"must be a list of {n}numbers; got {v!r}",
                   f"write e.g. {[1.0] * (length or 2)}")
    vals = [_number(x, file, key) for x in v]
    if positive and any(x <= 0 for x in vals):
        raise _err(file, key, f"entries must be > 0; got {v!r}", "use positive values")
    return vals


def _path(v, base: Path, file, key, *, must_exist=True, kind="file or folder") -> str:
    if not isinstance(v, str) or not v:
        raise _err(file, key, f"must be a path; got {v!r}", f"give the {kind} path")
    p = Path(v)
    if not p.is_absolute():
        p = base / p
    if must_exist and not p.exists():
        raise _err(file, key, f"points to {p}, which does not exist", f"give an existing {kind}")
    return str(p)


def load_segment_config(path, *, overrides: Mapping | None = None) -> dict:
    """Read and validate a segment ``run.yaml``; return the full config (defaults filled).

    Relative paths are read relative to the config file's folder. ``overrides`` (same
    nested shape) are applied before validation (used by tests and the demo).
    """
    data, file = _read_yaml(path)
    if overrides:
        data = _deep_update(data, overrides)
    return validate_segment_config(data, file=file, base=Path(path).parent)


def _deep_update(a: Mapping, b: Mapping) -> dict:
    out = copy.deepcopy(dict(a))
    for k, v in b.items():
        out[k] = _deep_update(out.get(k) or {}, v) if isinstance(v, Mapping) and k != "kwargs" else v
    return out


def validate_segment_config(data: Mapping, *, file: str = "<config>", base: Path = Path(".")) -> dict:
    """Validate a segment config mapping (see the module docstring for keys)."""
    cfg = _merge(data, SEGMENT_DEFAULTS, file=file, free=("kwargs",))
    cfg["network"] = _merge(cfg["network"], SEGMENT_DEFAULTS["network"], file=file,
                            prefix="network.", free=("kwargs",))
    for key in ("cases", "output"):
        if cfg[key] is None:
            raise _err(file, key, "is required", f"add '{key}: <path>'")
    cfg["cases"] = _path(cfg["cases"], base, file, "cases", kind="CSV file")
    cfg["output"] = _path(cfg["output"], base, file, "output", must_exist=False, kind="folder")
    if not isinstance(cfg["model"], str) or not cfg["model"]:
        raise _err(file, "model", f"must be a name; got {cfg['model']!r}", "write e.g. 'model: unet_v1'")
    _int(cfg, "seed", file, lo=0)
    _choice(cfg["device"], ("auto", "cpu", "cuda"), file, "device")
    if not isinstance(cfg["amp"], bool):
        raise _err(file, "amp", f"must be true or false; got {cfg['amp']!r}", "write true or false")
    t = cfg["transforms"]
    if t["orientation"] is not None and (not isinstance(t["orientation"], str)
                                         or len(t["orientation"]) != 3):
        raise _err(file, "transforms.orientation", f"must be 3 axis codes; got {t['orientation']!r}",
                   "write e.g. RAS, or null")
    t["spacing"] = _num_list(t["spacing"], file, "transforms.spacing", length=3, positive=True)
    t["window"] = _num_list(t["window"], file, "transforms.window", length=2)
    if t["window"] is not None and t["window"][0] >= t["window"][1]:
        raise _err(file, "transforms.window", f"must be [low, high] with low < high; got {t['window']}",
                   "swap or fix the values")
    n = cfg["network"]
    _choice(n["name"], NETWORKS, file, "network.name")
    if n["weights"] is not None:
        n["weights"] = _path(n["weights"], base, file, "network.weights",
                             kind=".pt file or bundle folder")
    _int(n, "in_channels", file, lo=1, name="network.in_channels")
    _int(n, "out_channels", file, lo=1, name="network.out_channels")
    if not isinstance(n["kwargs"], Mapping):
        raise _err(file, "network.kwargs", "must be a mapping", "write e.g. {channels: [8, 16]}")
    allowed = _network_parameters(n["name"])
    for k in n["kwargs"]:
        if k not in allowed:
            raise _err(file, f"network.kwargs.{k}", f"is not a parameter of {n['name']}",
                       f"use one of {sorted(allowed)}")
    i = cfg["inference"]
    i["roi_size"] = [int(x) for x in _num_list(i["roi_size"], file, "inference.roi_size", length=3,
                                               allow_none=False, positive=True)]
    _int(i, "sw_batch_size", file, lo=1, name="inference.sw_batch_size")
    i["overlap"] = _number(i["overlap"], file, "inference.overlap", lo=0, hi=0.95)
    _int(i, "tumour_channel", file, lo=0, hi=n["out_channels"] - 1, name="inference.tumour_channel")
    _choice(i["activation"], ("softmax", "sigmoid"), file, "inference.activation")
    i["threshold"] = _number(i["threshold"], file, "inference.threshold", lo=0, hi=1)
    _int(i, "min_component_voxels", file, lo=0, name="inference.min_component_voxels")
    _int(i, "connectivity", file, lo=1, hi=3, name="inference.connectivity")
    _choice(i["hit_rule"], ("iou", "dice", "centroid"), file, "inference.hit_rule")
    i["min_overlap"] = _number(i["min_overlap"], file, "inference.min_overlap", lo=0, hi=1,
                               open_lo=True)
    return cfg


def _network_parameters(name: str) -> set[str]:
    """Constructor parameters of the MONAI network class (introspection only, no model)."""
    from monai.networks import nets

    cls = {"unet": nets.UNet, "segresnet": nets.SegResNet}[name]
    params = set(inspect.signature(cls.__init__).parameters) - {"self", "args", "kwargs"}
    return params - {"spatial_dims", "in_channels", "out_channels"}


def load_probe_config(path, *, overrides: Mapping | None = None) -> dict:
    """Read and validate a probe ``probe.yaml``; return the full config."""
    data, file = _read_yaml(path)
    if overrides:
        data = _deep_update(data, overrides)
    return validate_probe_config(data, file=file, base=Path(path).parent)


def validate_probe_config(data: Mapping, *, file: str = "<config>", base: Path = Path(".")) -> dict:
    """Validate a probe config mapping (see the module docstring for keys)."""
    cfg = _merge(data, PROBE_DEFAULTS, file=file)
    if cfg["output"] is None:
        raise _err(file, "output", "is required", "add 'output: <folder>'")
    cfg["output"] = _path(cfg["output"], base, file, "output", must_exist=False, kind="folder")
    _int(cfg, "seed", file, lo=0)
    _choice(cfg["device"], ("auto", "cpu", "cuda"), file, "device")
    seeds = cfg["seeds"]
    if not isinstance(seeds, list) or not seeds or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise _err(file, "seeds", f"must be a list of distinct whole numbers >= 0; got {seeds!r}",
                   "write e.g. [0, 1, 2]")
    for j, d in enumerate(_named_entries(cfg, "datasets", DATASET_DEFAULTS, file,
                                         "add '- {name: x, cases: x.csv}'")):
        d["cases"] = _path(d["cases"], base, file, f"datasets[{j}].cases", kind="CSV file")
        if not isinstance(d["shift_sites"], list):
            raise _err(file, f"datasets[{j}].shift_sites", "must be a list of site names",
                       "write e.g. [site_12] or []")
    for j, e in enumerate(_named_entries(cfg, "encoders", ENCODER_DEFAULTS, file,
                                         "add '- {name: x, kind: resnet}'")):
        _choice(e["kind"], ENCODER_KINDS, file, f"encoders[{j}].kind")
        _choice(e["depth"], DEPTHS, file, f"encoders[{j}].depth")
        if e["depths"] is not None:
            d = e["depths"]
            if (not isinstance(d, list) or not d or len(set(map(str, d))) != len(d)):
                raise _err(file, f"encoders[{j}].depths", f"must be a list of distinct depths; got {d!r}",
                           f"write e.g. [mid, last] (from {list(DEPTHS)})")
            for x in d:
                _choice(x, DEPTHS, file, f"encoders[{j}].depths")
        _int(e, "width", file, lo=1, name=f"encoders[{j}].width")
        if e["weights"] is not None:
            e["weights"] = _path(e["weights"], base, file, f"encoders[{j}].weights", kind=".pt file")
    fr = cfg["label_fractions"]
    if not isinstance(fr, list) or not fr:
        raise _err(file, "label_fractions", f"must be a non-empty list; got {fr!r}", "write e.g. [0.1, 1.0]")
    cfg["label_fractions"] = [_number(f, file, "label_fractions", lo=0, hi=1, open_lo=True) for f in fr]
    if 1.0 not in cfg["label_fractions"]:
        raise _err(file, "label_fractions", "must include 1.0", "add 1.0 (axes are read there)")
    p = cfg["perturbations"]
    if not isinstance(p, list):
        raise _err(file, "perturbations", "must be a list", f"use names from {list(PERTURBATIONS)}")
    for x in p:
        _choice(x, PERTURBATIONS, file, "perturbations")
    s = cfg["severities"]
    if not isinstance(s, list) or any(x not in (1, 2, 3) for x in s):
        raise _err(file, "severities", f"must be a list drawn from [1, 2, 3]; got {s!r}", "write [1, 2, 3]")
    cfg["test_fraction"] = _number(cfg["test_fraction"], file, "test_fraction", lo=0.05, hi=0.9)
    a = cfg["adapt"]
    if not isinstance(a["enabled"], bool):
        raise _err(file, "adapt.enabled", f"must be true or false; got {a['enabled']!r}",
                   "write enabled: true")
    _int(a, "rank", file, lo=1, hi=256, name="adapt.rank")
    _int(a, "steps", file, lo=0, hi=100_000, name="adapt.steps")
    _int(a, "batch_size", file, lo=1, name="adapt.batch_size")
    a["alpha"] = _number(a["alpha"], file, "adapt.alpha", lo=0, open_lo=True)
    a["lr"] = _number(a["lr"], file, "adapt.lr", lo=0, hi=1, open_lo=True)
    _int(cfg, "image_size", file, lo=8, hi=512)
    return cfg


def _named_entries(cfg: dict, key: str, defaults: Mapping, file: str, fix: str) -> list[dict]:
    """Validate ``cfg[key]``: a non-empty list of mappings with unique ``name``s; each is
    merged with ``defaults`` in place. Returns the merged list."""
    if not isinstance(cfg[key], list) or not cfg[key]:
        raise _err(file, key, "must be a non-empty list", fix)
    names: set = set()
    for j, entry in enumerate(cfg[key]):
        entry = cfg[key][j] = _merge(entry, defaults, file=file, prefix=f"{key}[{j}].")
        if not isinstance(entry["name"], str) or not entry["name"] or entry["name"] in names:
            raise _err(file, f"{key}[{j}].name", f"must be a unique name; got {entry['name']!r}",
                       f"give every entry of {key} its own name")
        names.add(entry["name"])
    return cfg[key]


def config_hash(cfg: Mapping) -> str:
    """sha256 of the canonical JSON form of a validated config."""
    text = json.dumps(cfg, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"k/n"`` (1-based k) -> ``(k, n)``; ``None`` -> ``(1, 1)``."""
    if text is None:
        return 1, 1
    try:
        k, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ConfigError(f"--shard {text!r}: write k/n with whole numbers, e.g. 1/4") from None
    if n < 1 or not 1 <= k <= n:
        raise ConfigError(f"--shard {text!r}: need 1 <= k <= n (k counts from 1); e.g. 1/{max(n, 2)}")
    return k, n
