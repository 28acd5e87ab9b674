"""A griffe extension for the Python reference: each keyword a face takes as
``**options: Unpack[...]`` (spelled out by griffe's own ``unpack_typeddict``, which runs
first) is described in the words of `wheelq.core.options.KEYWORD_DOCS`, as `takes` writes
them for ``help()``: the option table is their one source."""

from __future__ import annotations

from typing import Any

import griffe

from wheelq.core.options import KEYWORD_DOCS


class OptionDocs(griffe.Extension):
    """Describe each keyword left without words in a function's parameters section."""

    def on_function(self, *, func: griffe.Function, **kwargs: Any) -> None:
        if not func.docstring:
            return
        for section in func.docstring.parsed:
            if section.kind is griffe.DocstringSectionKind.parameters:
                for param in section.value:
                    if not param.description and param.name in KEYWORD_DOCS:
                        param.description = KEYWORD_DOCS[param.name]
