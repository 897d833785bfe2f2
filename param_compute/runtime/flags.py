"""Command-line flags declared on dataclass fields: one place says which flag sets which field.

A field made with :func:`flag` carries its flag names, help text, argparse settings and, where
the command line's value is not the field's (``--max-memory 8GB`` -> bytes, ``--cuda-l2-cache
on`` -> True), a ``parse`` function. :func:`add_arguments` declares the flags of a dataclass on a
parser (the argparse ``dest`` is the field's name) and :func:`values_from_args` reads the parsed
values back as field values, so adding a flag is adding one field. Torch-free, argparse only.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import MISSING, Field
from typing import Any, Callable, Dict, Optional, Tuple


def flag(*names: str, default: Any = MISSING, default_factory: Any = MISSING, help: str,
         parse: Optional[Callable[[Any], Any]] = None, cli_default: Any = MISSING,
         **argparse_kwargs: Any) -> Any:
    """A dataclass field set by the flags ``names`` (``"-w", "--warmup"``).

    ``argparse_kwargs`` go to ``add_argument`` (``type``, ``choices``, ``action``,
    ``metavar``...); ``cli_default`` is the command line's default where its form differs from
    the field's; ``parse`` turns the parsed value into the field's value."""
    if cli_default is not MISSING:
        argparse_kwargs["default"] = cli_default
    metadata = {"flags": names, "help": help, "parse": parse, "argparse": argparse_kwargs}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_fields(cls: type) -> Dict[str, Field]:
    """The fields of ``cls`` that a flag sets, by name, in declaration order."""
    return {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("flags")}


def add_arguments(parser: Any, cls: type,
                  names: Optional[Dict[str, Tuple[str, ...]]] = None) -> None:
    """Declare every flag of ``cls`` on ``parser`` (a parser or an argument group); ``names``
    gives some fields other flag names on this parser (``{"output": ("-o", "--output")}``)."""
    names = names or {}
    for name, f in flag_fields(cls).items():
        kwargs = dict(f.metadata["argparse"])
        if kwargs.get("action") == "append":  # a list argparse extends (copied, not changed)
            kwargs.setdefault("default", [])
        elif "default" not in kwargs:
            kwargs["default"] = (f.default if f.default is not MISSING
                                 else f.default_factory())  # type: ignore[misc]
        parser.add_argument(*names.get(name, f.metadata["flags"]), dest=name,
                            help=f.metadata["help"], **kwargs)


def values_from_args(cls: type, args: argparse.Namespace) -> Dict[str, Any]:
    """The field values the parsed command line gives (each through its ``parse``)."""
    values = {}
    for name, f in flag_fields(cls).items():
        value = getattr(args, name)
        parse = f.metadata["parse"]
        values[name] = parse(value) if parse is not None and value is not None else value
    return values


def flag_names(cls: type) -> Dict[str, str]:
    """Field name -> its long flag (``max_memory`` -> ``--max-memory``), for messages."""
    return {name: next((n for n in f.metadata["flags"] if n.startswith("--")),
                       f.metadata["flags"][0]) for name, f in flag_fields(cls).items()}
