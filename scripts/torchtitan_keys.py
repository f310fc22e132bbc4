#!/usr/bin/env python3
# Writes the list of torchtitan's JobConfig keys (one per line, tab-separated:
# key, type, default, values) that tests/config/test_config.c holds titan-train's
# schema to: every key must be known to titan with this type and this default.
# Types and defaults are spelled the way titan-train takes them on its command
# line (see titan-config(5)): "none" for None, a list as "a,b", a string bare.
# Run: $PYTHON scripts/torchtitan_keys.py > tests/config/torchtitan-0.2.2-keys.tsv
# Needs torchtitan 0.2.2 (pip install torchtitan==0.2.2), the last release
# configured by TOML files.  scripts/torchtitan030_keys.py spells 0.3.0's
# types and values with type_of and text_of.
import dataclasses
import importlib.metadata
import sys
import types
import typing

WANT = "0.2.2"


def split_optional(t):
    """(inner type, whether None is allowed) of t."""
    args = typing.get_args(t)
    if typing.get_origin(t) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        inner = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
        return inner, True
    return t, False


def is_list_of_str(t):
    return typing.get_origin(t) is list and typing.get_args(t) == (str,)


def type_of(t):
    """titan's name for the type and the '|'-separated values, or '-'."""
    inner, opt = split_optional(t)
    none = " or none" if opt else ""
    args = typing.get_args(inner)
    if typing.get_origin(inner) is typing.Literal:
        return "string" + none, "|".join(args)
    if inner is bool:
        return "bool" + none, "-"
    if inner is int:
        return "int" + none, "-"
    # float | int (training.max_norm) reads as a float.
    if inner is float or (typing.get_origin(inner) in (typing.Union, types.UnionType) and
                          set(args) == {float, int}):
        return "float" + none, "-"
    if inner is str:
        return "string" + none, "-"
    # list[str] | str (quantize.grouped_mm.*.fqns): a list, or one "a,b" string.
    if is_list_of_str(inner) or (typing.get_origin(inner) in (typing.Union, types.UnionType) and
                                 any(is_list_of_str(a) for a in args) and str in args):
        return "list of strings" + none, "-"
    if typing.get_origin(inner) is list and len(args) == 1 and is_list_of_str(args[0]):
        return "list of lists of strings" + none, "-"
    sys.exit(f"torchtitan_keys.py: no titan type for {t!r}")


def text_of(v):
    """A default as titan-train's command line takes it."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        if "\t" in v or "\n" in v or v in ("none", "None"):
            sys.exit(f"torchtitan_keys.py: default {v!r} cannot be written")
        return v
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return ",".join(v)
    sys.exit(f"torchtitan_keys.py: default {v!r} cannot be written")


def walk(cls, prefix):
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.type):
            yield from walk(f.type, prefix + f.name + ".")
            continue
        if f.default is not dataclasses.MISSING:
            d = f.default
        else:
            d = f.default_factory()
        yield prefix + f.name, f.type, d


def main():
    from torchtitan.config.job_config import JobConfig

    have = importlib.metadata.version("torchtitan")
    if have != WANT:
        sys.exit(f"torchtitan_keys.py: torchtitan {have} installed, the list is of {WANT}")
    print(f"# torchtitan {WANT} JobConfig keys: key, type, default, values "
          f"(made by scripts/torchtitan_keys.py)")
    for key, t, d in walk(JobConfig, ""):
        name, values = type_of(t)
        print(f"{key}\t{name}\t{text_of(d)}\t{values}")


if __name__ == "__main__":
    main()
