"""Hot model reload: verify, load and warm a new bundle beside the running one, then swap.

    reloader = HotReloader(models_dir, loader=running.load)   # edge_sdk.daemon.model.RunningModel
    reloader.request("faces-v2")          # returns at once; a worker thread does the work
    ...
    new = reloader.poll()                 # frame loop, between two frames
    if new is not None:
        running.swap(new)                 # the new detector from the next frame; the old model retired

Every step that can fail (path outside the model folder, sha256, schema, backend, decoder,
warm-up inference: edge_sdk.runtime.model.load_model) fails on the worker, before any swap:
the old model keeps running and the failure is reported through `on_result` (the daemon
raises an alert).
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable, Optional

from edge_sdk.errors import BundleError, ConfigError
from edge_sdk.runtime.model import Model

log = logging.getLogger(__name__)


def resolve_in(models_dir: Path, name: str) -> Path:
    """`name` (relative, or absolute) as a folder inside `models_dir`; anything else is refused."""
    root = Path(models_dir).resolve()
    candidate = Path(name)
    path = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if path != root and root not in path.parents:
        raise ConfigError(f"bundle {name!r} is outside the model folder {root}; copy it there first")
    if not path.is_dir():
        raise BundleError(f"no bundle folder {path}; copy the bundle into {root}")
    return path


class HotReloader:
    """Loads a new model on a worker thread and hands it to the frame loop once it is ready.

    `loader(path, precision) -> Model` does the loading (RunningModel.load); `on_result(model,
    error, path)` hears of every failure on the worker (the model is None then). Counting
    reloads and failures is the running model's (RunningModel.describe).
    """

    def __init__(
        self,
        models_dir: Optional[Path],
        loader: Callable[..., Model],
        on_result: Optional[Callable[[Optional[Model], Optional[BaseException], str], None]] = None,
    ) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.loader = loader
        self.on_result = on_result
        self._lock = threading.Lock()
        self._worker: Optional[threading.Thread] = None
        self._ready: Optional[Model] = None
        self._tag: Optional[str] = None
        self.shadow = False  # the model loading (or handed over last) is a shadow candidate, not a swap

    @property
    def busy(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def request(self, name: str, precision: Optional[str] = None, tag: Optional[str] = None,
                shadow: bool = False) -> Path:
        """Start loading `name` (a folder inside the model folder). Raises at once for a bad
        path or when a reload is already in progress; later failures go to `on_result`.
        `tag` (a command id) is kept for whoever reports the outcome: see `take_tag()`; `shadow`
        marks the model for a shadow run (read `shadow` after `poll()` hands it over)."""
        if self.models_dir is None:
            raise ConfigError("reload needs a model folder: set models_dir in the device config")
        return self.load(resolve_in(self.models_dir, name), precision, tag, shadow)

    def take_tag(self) -> Optional[str]:
        """The tag of the reload whose outcome is being reported, once (None afterwards)."""
        with self._lock:
            tag, self._tag = self._tag, None
        return tag

    def load(self, path: Path, precision: Optional[str] = None, tag: Optional[str] = None,
             shadow: bool = False, prepare: Optional[Callable[[], None]] = None) -> Path:
        """Start loading the bundle at `path` (trusted: from the device's own config). `prepare`,
        when given, runs first on the worker and puts the bundle there (a download:
        edge_sdk.daemon.fetch); what it raises is the reload's failure."""
        with self._lock:
            if self.busy or self._ready is not None:
                raise ConfigError("a reload is already in progress; wait for its alert or response")
            self._tag = tag
            self.shadow = shadow
            self._worker = threading.Thread(target=self._load, args=(path, precision, prepare), name="model-reload", daemon=True)
            self._worker.start()
        return path

    def _load(self, path: Path, precision: Optional[str], prepare: Optional[Callable[[], None]] = None) -> None:
        try:
            if prepare is not None:
                prepare()
            model = self.loader(path, precision)
        except Exception as exc:  # noqa: BLE001 - any failure is the result: reported, alert raised
            # (ONNX Runtime and TensorRT raise their own exception types for a broken model)
            log.error("reload of %s refused: %s", path, exc)
            if self.on_result is not None:
                try:
                    self.on_result(None, exc, str(path))
                except Exception:  # noqa: BLE001 - the worker ends here; nothing else would report it
                    log.exception("reporting the failed reload of %s failed", path)
            return
        with self._lock:
            self._ready = model

    def poll(self) -> Optional[Model]:
        """Frame loop: the model to swap in now, once; None most of the time (a cheap check)."""
        if self._ready is None:
            return None
        with self._lock:
            model, self._ready = self._ready, None
        return model

    def join(self, timeout: Optional[float] = None) -> None:
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
