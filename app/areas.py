"""The studio's areas, one package each (``app/overview/``, ``app/action/``…), whose
blueprints are found and registered automatically.

An area's pages are in its ``views.py`` (and ``<name>_views.py`` when it has a second
blueprint, such as ``action/signal_views.py``), each defining ``bp = Blueprint("<name>",
__name__, url_prefix=...)``: ``register_all`` registers every blueprint in name order, so no
shared list has to be edited. Templates go in ``templates/<blueprint name>/``: a page per
view, and ``_fragment.html`` files for htmx swaps.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from flask import Blueprint, Flask

#: The studio's package (``app``), whose sub-packages are the areas.
PACKAGE = __name__.rpartition(".")[0]
ROOT = Path(__file__).resolve().parent


def modules() -> list[str]:
    """The views modules of every area: ``app.<area>.views`` and ``app.<area>.<name>_views``."""
    found = []
    for area in pkgutil.iter_modules([str(ROOT)]):
        if not area.ispkg or area.name.startswith("_"):
            continue
        for info in pkgutil.iter_modules([str(ROOT / area.name)]):
            if info.name == "views" or info.name.endswith("_views"):
                found.append(f"{PACKAGE}.{area.name}.{info.name}")
    return sorted(found)


def register_all(app: Flask) -> None:
    blueprints = []
    for name in modules():
        bp = getattr(importlib.import_module(name), "bp", None)
        if not isinstance(bp, Blueprint):
            path = name.replace(".", "/")
            raise TypeError(f"{path}.py must define bp = Blueprint('<name>', __name__, ...)")
        blueprints.append(bp)
    for bp in sorted(blueprints, key=lambda bp: bp.name):
        app.register_blueprint(bp)
