"""The model store (docs/design.md §1): finds each IP's artefacts, never outside the store."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from ..errors import JobError, UsageError
from ..result import Status
from . import manifest
from .files import outside, read_json

IP_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
MODEL_SUFFIXES = (".h5", ".keras")
SAVED_MODEL_FILE = "saved_model.pb"
_NO_MODEL = "no model in model/ ({ip}.h5, {ip}.keras or {ip}/saved_model.pb)"
SAVING = ".{ip}.saving"  # in model/ while train writes the IP's model, scaler and std (commands/train._save)


@dataclass(frozen=True)
class Artefacts:
    model: str   # relative to the store
    scaler: str  # relative to the store
    std: float


class Store:
    """The store's folders are listed once: a lookup is then a set membership, not a stat per file."""

    def __init__(self, root: str, *, fresh: bool = False) -> None:
        """`fresh`: a store train is about to fill, whose folders may not be there yet. Any other store without
        a model/ folder is a wrong --models (a parent folder, a typo'd mount), not a night of no_model rows."""
        if not os.path.isdir(root):
            raise UsageError(f"model store not found: {root}")
        if not fresh and not os.path.isdir(os.path.join(root, "model")):
            what = "is not a folder" if os.path.lexists(os.path.join(root, "model")) else "is missing"
            raise UsageError(f"{root} is no model store: its model/ folder {what}")
        self.root = os.path.realpath(root)
        self.stds = _read_stds(self.root)
        self.manifest = manifest.read(self.root)  # entries by IP; None: the store has no manifest.json
        self._models = _Folder(self.root, "model")
        self._scalers = _Folder(self.root, "sc")

    def check_ip(self, ip: str) -> None:
        if not ip:
            raise JobError(Status.INVALID_INPUT, "empty IP id")
        if len(ip) > 255 or not IP_PATTERN.fullmatch(ip):
            raise JobError(Status.INVALID_INPUT,
                           f"invalid IP id {ip[:80]!r}: expected [A-Za-z0-9][A-Za-z0-9._:-]*, at most 255 chars")

    def model_candidates(self, ip: str) -> list[str]:
        """Every model artefact present for `ip`, relative to the store."""
        folder = self._models
        if folder.has_none_of(ip):
            return []
        names = model_names(ip)
        for name in names:
            folder.check_inside(name)
        return [os.path.join(folder.name, name) for name in names
                if (name in folder.files and name.endswith(MODEL_SUFFIXES))
                or (name in folder.dirs and os.path.isfile(os.path.join(folder.path, name, SAVED_MODEL_FILE)))]

    def model(self, ip: str) -> str:
        """The IP's one model artefact relative to the store, or JobError: no_model, or load_error when ambiguous
        or when a training run stopped while writing its artefacts (its SAVING marker)."""
        marker = SAVING.format(ip=ip)
        if marker in self._models.files:
            raise JobError(Status.LOAD_ERROR, f"a training run stopped while writing its model, scaler and std "
                                              f"(model/{marker}): they may not belong together; train it again")
        folder = self._models
        if folder.has_none_of(ip):  # most IPs of a big table: said without looking at each candidate name
            raise JobError(Status.NO_MODEL, _NO_MODEL.format(ip=ip))
        models = self.model_candidates(ip)
        if len(models) > 1:
            raise JobError(Status.LOAD_ERROR, f"ambiguous model: {' and '.join(models)} both exist; keep one")
        if not models:
            names = model_names(ip)
            _no_special(folder, names)
            odd = [name for name in names if name in folder.dirs]
            if odd:  # there, but not a model: worse than missing
                what = "is a directory" if odd[0] != ip else f"is a directory without {SAVED_MODEL_FILE}"
                raise JobError(Status.LOAD_ERROR, f"{folder.name}/{odd[0]} {what}, not a model")
            raise JobError(Status.NO_MODEL, _NO_MODEL.format(ip=ip))
        return models[0]

    def scaler(self, ip: str) -> str:
        """The IP's scaler relative to the store, or JobError(no_model)."""
        name = ip + ".save"
        self._scalers.check_inside(name)
        rel = os.path.join(self._scalers.name, name)
        if name in self._scalers.dirs:
            raise JobError(Status.LOAD_ERROR, f"{rel} is a directory, not a scaler file")
        _no_special(self._scalers, (name,))
        if name not in self._scalers.files:
            raise JobError(Status.NO_MODEL, f"no scaler {rel}")
        return rel

    def sealed(self, ip: str, allow_unsealed: bool = False) -> dict | None:
        """The IP's manifest entry: None without a manifest (or, allowed, where it does not list the IP);
        JobError(load_error) when a manifest exists and does not list it."""
        if self.manifest is None:
            return None
        found = self.manifest.get(ip)
        if found is None and not allow_unsealed:
            raise JobError(Status.LOAD_ERROR, f"not in {manifest.FILE}: seal the store (batchpredict store seal "
                                              "--models DIR) or pass --allow-unsealed")
        return found

    def std(self, ip: str) -> float:
        """The IP's std.json entry, or JobError: no_model when missing, load_error when not a number."""
        if ip not in self.stds:
            raise JobError(Status.NO_MODEL, "no entry in std/std.json")
        std = self.stds[ip]
        if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std < 0:
            raise JobError(Status.LOAD_ERROR, f"std/std.json entry is not a finite non-negative number: {std!r}")
        return float(std)

    def artefacts(self, ip: str) -> Artefacts:
        """The IP's artefacts, or JobError with the row's status (invalid_input, no_model, load_error)."""
        self.check_ip(ip)
        return Artefacts(self.model(ip), self.scaler(ip), self.std(ip))

    def seal(self, skip: set[str] | None = None) -> tuple[dict[str, dict], dict[str, str]]:
        """Manifest entries of every IP with all its artefacts (but those in `skip`), and why the rest have none."""
        entries, skipped = {}, {}
        for ip in self.ips():
            if skip and ip in skip:
                continue
            try:
                found = self.artefacts(ip)
            except JobError as exc:
                skipped[ip] = str(exc)
                continue
            entries[ip] = manifest.entry(self.root, found.model, found.scaler, found.std)
        return entries, skipped

    def ips(self) -> list[str]:
        """Every id the store mentions: model/ entries, sc/*.save and std.json keys, sorted."""
        names = set(map(str, self.stds))
        for folder, suffixes in (("model", MODEL_SUFFIXES), ("sc", (".save",))):
            path = os.path.join(self.root, folder)
            for entry in os.listdir(path) if os.path.isdir(path) else []:
                if entry.startswith("."):  # staging files of a training run
                    continue
                if entry.endswith(suffixes):
                    names.add(os.path.splitext(entry)[0])
                elif folder == "model" and os.path.isdir(os.path.join(path, entry)):
                    names.add(entry)
        return sorted(names)


def model_names(ip: str) -> tuple[str, ...]:
    """The names in model/ that could be the IP's model: a file of each suffix, or a SavedModel folder."""
    return (*(ip + suffix for suffix in MODEL_SUFFIXES), ip)


def _read_stds(root: str) -> dict:
    path = os.path.join(root, "std", "std.json")
    if not os.path.lexists(path):
        return {}
    data = read_json(path, root)
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a JSON object {{\"<ip>\": <std>, ...}}")
    return data


def _no_special(folder: _Folder, names: tuple[str, ...]) -> None:
    """JobError(load_error) where one of `names` is there but is no file or folder (a worker would block on a FIFO)."""
    for name in names:
        if name in folder.others:
            raise JobError(Status.LOAD_ERROR, f"{folder.name}/{name} is not a regular file")


class _Folder:
    """One folder of the store as listed when the run starts: its files and directories by name (symlinks
    followed, as os.path.isfile does), and the names whose path resolves outside the store."""

    def __init__(self, root: str, name: str) -> None:
        self.name = name
        self.path = os.path.join(root, name)
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.others: set[str] = set()
        self.stems: set[str] = set()  # every name, with and without its suffix
        self._escaping: set[str] = set()
        # A folder that is itself a link out of the store takes every path in it along.
        self.outside = outside(root, self.path)
        try:
            with os.scandir(self.path) as entries:
                for entry in entries:
                    name = entry.name
                    self.stems.update((name, name.rsplit(".", 1)[0]))
                    if entry.is_symlink() and outside(root, entry.path):
                        self._escaping.add(name)
                    try:
                        if entry.is_file():
                            self.files.add(name)
                        elif entry.is_dir():
                            self.dirs.add(name)
                        elif os.path.exists(entry.path):  # a FIFO, a socket, a device (a dangling link is missing)
                            self.others.add(name)
                    except OSError:  # a link in a loop (ELOOP): there, but no file; the names after it still count
                        self.others.add(name)
        except OSError:  # missing, not a folder, unreadable: nothing in it, as os.path.isfile would say
            pass

    def has_none_of(self, ip: str) -> bool:
        """No name here is one of the IP's (model_names), so none of them leaves the store either."""
        return ip not in self.stems and not self.outside

    def check_inside(self, name: str) -> None:
        if self.outside or name in self._escaping:
            raise JobError(Status.INVALID_INPUT, f"{os.path.join(self.name, name)} resolves outside the store")
