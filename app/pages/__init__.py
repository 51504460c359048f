"""The studio's pages, one blueprint module per area, found and registered automatically.

To add an area, add a module here that defines ``bp = Blueprint("<module name>", __name__,
url_prefix=...)``: ``register_all`` registers every module's ``bp`` in name order, so no shared
list has to be edited. Modules whose names start with ``_`` are skipped. Templates go in
``templates/<module name>/``: a page per view, and ``_fragment.html`` files for htmx swaps.
"""

from __future__ import annotations

import importlib
import pkgutil

from flask import Blueprint, Flask


def modules() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


def register_all(app: Flask) -> None:
    for name in modules():
        module = importlib.import_module(f"{__name__}.{name}")
        bp = getattr(module, "bp", None)
        if not isinstance(bp, Blueprint):
            raise TypeError(f"app/pages/{name}.py must define bp = Blueprint({name!r}, __name__, ...)")
        app.register_blueprint(bp)
