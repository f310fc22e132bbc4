#!/usr/bin/env python3
# Writes, for every preset of the families titan has (every public function
# of torchtitan 0.3.0's models/<family>/config_registry.py that returns a
# Trainer.Config), the leaf paths of its Trainer.Config, one per line,
# tab-separated: preset, path, type, the preset's value, and the value as
# 0.3.0's --debug.print_config writes it (JSON); model_spec's name and flavor
# first, as Trainer.Config.to_dict() puts them.
# tests/config/test_config.c holds titan-train's table to it: every path must
# be in lib/config/tt030.c's table, and where it sets a titan key, titan's
# value for the preset must be this one (a preset titan refuses must be
# refused); tests/config/print030.sh holds titan-train --debug.print_config's
# output to the JSON column.  Types and values are spelled as
# scripts/torchtitan_keys.py spells 0.2.2's ("none", lists as "a,b"); a value
# that is a Python object is written "<python>".
# Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/torchtitan030_keys.py \
#        [PRESET ...] > tests/config/torchtitan-0.3.0-keys.tsv
# (default: every preset; torchtitan 0.3.0 installed outside the repository:
# pip install --no-deps --target DIR torchtitan==0.3.0 torch_checkpointing
# spmd_types==0.2.3, then PYTHONPATH=DIR)
import dataclasses
import importlib
import inspect
import json
import os
import sys
import typing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchtitan_keys as k22  # noqa: E402  (0.2.2's spelling of types and values)

WANT = "0.3.0"
# The families titan has; their presets are every public function of
# models/<family>/config_registry.py that returns a Trainer.Config, in source
# order.
FAMILIES = ["llama3", "qwen3", "deepseek_v3", "gpt_oss", "flux"]


def type_name(t):
    """titan's name for a field's type, as 0.2.2's list spells it."""
    try:
        return k22.type_of(t)[0]
    except SystemExit:  # a Python object (param groups, callables, dicts)
        return "python object"


def value_text(v):
    """The value as titan-train's command line takes it ("<python>" for an
    object, "{}" for an empty dict)."""
    if isinstance(v, dict) and not v:
        return "{}"
    try:
        return k22.text_of(v)
    except SystemExit:
        return "<python>"


def value_json(v):
    """The value as 0.3.0's --debug.print_config writes it: json.dumps of
    Trainer.Config.to_dict()'s entry, on one line ("<python>" for an object
    JSON cannot hold)."""
    def plain(x):
        if hasattr(x, "to_dict"):
            return x.to_dict()
        if dataclasses.is_dataclass(x):
            return dataclasses.asdict(x)
        raise TypeError(type(x).__name__)

    try:
        return json.dumps(v, ensure_ascii=False, default=plain)
    except TypeError:
        return "<python>"


def walk(obj, prefix):
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if f.name == "model_spec":
            continue
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            yield from walk(v, prefix + f.name + ".")
            continue
        yield prefix + f.name, hints.get(f.name, f.type), v


def presets():
    """(family, preset) of every preset function, in source order."""
    for family in FAMILIES:
        reg = importlib.import_module(f"torchtitan.models.{family}.config_registry")
        fns = [f for n, f in vars(reg).items() if inspect.isfunction(f) and not n.startswith("_")
               and f.__module__ == reg.__name__
               and "Trainer.Config" in str(inspect.signature(f).return_annotation)]
        for f in sorted(fns, key=lambda f: f.__code__.co_firstlineno):
            yield family, f.__name__


def evaluate(family, preset):
    """The preset's Trainer.Config, and what its model_registry calls asked
    for beyond the flavor (converters, attention and MoE backends).  The
    calls are made without them: torchao and the Hopper-only flex_flash check
    need hardware and packages a CPU reference lacks, and none of them is a
    Trainer.Config path."""
    reg = importlib.import_module(f"torchtitan.models.{family}.config_registry")
    original = reg.model_registry
    asked = {}

    def registry(flavor, **kw):
        for k, v in kw.items():
            asked[k] = v
        keep = {"attn_backend": kw["attn_backend"]} if "attn_backend" in kw else {}
        if keep.get("attn_backend") == "flex_flash":
            keep["attn_backend"] = "flex"
        return original(flavor, **keep)

    reg.model_registry = registry
    try:
        return getattr(reg, preset)(), asked
    finally:
        reg.model_registry = original


def main():
    import torchtitan
    have = getattr(torchtitan, "__version__", None) or importlib.metadata.version("torchtitan")
    if have != WANT:
        sys.exit(f"torchtitan030_keys.py: torchtitan {have} installed, the list is of {WANT}")
    print(f"# torchtitan {WANT} Trainer.Config paths under each preset: preset, path, type, "
          f"the preset's value, as JSON (made by scripts/torchtitan030_keys.py)")
    for family, preset in [(f, p) for f, p in presets() if p in sys.argv[1:] or len(sys.argv) == 1]:
        config, asked = evaluate(family, preset)
        spec = config.model_spec
        for path, v in (("model_spec.name", spec.name), ("model_spec.flavor", spec.flavor)):
            print(f"{preset}\t{path}\tstring\t{v}\t{value_json(v)}")
        for path, t, v in walk(config, ""):
            print(f"{preset}\t{path}\t{type_name(t)}\t{value_text(v)}\t{value_json(v)}")


main()
