#!/usr/bin/env python3
# Writes the leaf paths of torchtitan 0.3.0's Trainer.Config under each preset
# titan has (one per line, tab-separated: preset, path, type, the preset's
# value) that
# tests/config/test_config.c holds titan-train to: every path must be in
# lib/config/tt030.c's table, and where it sets a titan key, titan's value
# for the preset must be this one.  Types and values are spelled as
# scripts/torchtitan_keys.py spells 0.2.2's ("none", lists as "a,b"); a value
# that is a Python object is written "<python>".
# Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/torchtitan030_keys.py \
#        [PRESET ...] > tests/config/torchtitan-0.3.0-keys.tsv
# (default: PRESETS below; torchtitan 0.3.0 installed outside the repository:
# pip install --no-deps --target DIR torchtitan==0.3.0 torch_checkpointing
# spmd_types==0.2.3, then PYTHONPATH=DIR)
import dataclasses
import importlib
import os
import sys
import typing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchtitan_keys as k22  # noqa: E402  (0.2.2's spelling of types and values)

WANT = "0.3.0"
# lib/config/tt030.c's presets
PRESETS = ["llama3_debugmodel", "llama3_debugmodel_ce_loss", "llama3_8b", "llama3_70b",
           "qwen3_debugmodel", "deepseek_v3_debugmodel"]


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


def main():
    import torchtitan
    have = getattr(torchtitan, "__version__", None) or importlib.metadata.version("torchtitan")
    if have != WANT:
        sys.exit(f"torchtitan030_keys.py: torchtitan {have} installed, the list is of {WANT}")
    print(f"# torchtitan {WANT} Trainer.Config paths under each preset titan has: preset, "
          f"path, type, the preset's value (made by scripts/torchtitan030_keys.py)")
    for preset in sys.argv[1:] or PRESETS:
        family = next(f for f in ("deepseek_v3", "gpt_oss", "llama3", "qwen3") if preset.startswith(f))
        reg = importlib.import_module(f"torchtitan.models.{family}.config_registry")
        for path, t, v in walk(getattr(reg, preset)(), ""):
            print(f"{preset}\t{path}\t{type_name(t)}\t{value_text(v)}")


main()
