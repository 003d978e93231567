"""The optional ``runner`` extra: the only commands that need torch, MONAI, nibabel,
pillow or pydicom check for them first and exit 2 saying how to install them.

``pip install clinrel`` gives ``stats``, ``reports`` and every other command;
``pip install 'clinrel[runner]'`` adds the packages of ``inference_runner``
(``clinrel infer``, ``clinrel demo --regenerate``, ``clinrel metadata extract``: DICOM
headers with pydicom, and every report mention's clinical context with medspaCy).
"""
from __future__ import annotations

import importlib.util

from ._common import InputError

#: import names of the runner extra's packages (pyproject.toml, [project.optional-dependencies])
RUNNER_MODULES = ("torch", "monai", "nibabel", "PIL", "pydicom")
#: their distribution names, as pip knows them
DISTRIBUTIONS = {"torch": "torch", "monai": "monai", "nibabel": "nibabel", "PIL": "pillow",
                 "pydicom": "pydicom", "medspacy": "medspacy"}

MSG_NEEDS_RUNNER = ("{what} needs the inference runner's packages, and {missing} "
                    "{verb} not installed; install them with: pip install 'clinrel[runner]' "
                    "(from a source checkout: pip install -e '.[runner]', or make install)")


def missing(modules) -> list[str]:
    """The distributions of ``modules`` that cannot be imported here (not installed)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(DISTRIBUTIONS.get(name, name))
    return out


def require_runner(what: str, modules=RUNNER_MODULES) -> None:
    """Raise :class:`InputError` (exit 2) naming ``what`` and the install command when any
    of ``modules`` is missing."""
    gone = missing(modules)
    if gone:
        raise InputError(MSG_NEEDS_RUNNER.format(what=what, missing=", ".join(gone),
                                                 verb="is" if len(gone) == 1 else "are"))
