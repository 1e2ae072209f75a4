"""One layer as read from an artefact, what building it yields, and the checks every layer function makes."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ...errors import Unsupported

Shape = tuple[int | None, ...]  # a tensor's shape without the batch axis; None where it varies


@dataclass(frozen=True)
class LayerSpec:
    class_name: str
    config: dict
    weights: tuple[np.ndarray, ...] = ()
    weight_names: tuple[str, ...] = ()  # as the file names them (Keras 1 weights are told apart by name)

    @property
    def name(self) -> str:
        return str(self.config.get("name", "?"))

    def __str__(self) -> str:
        return f"{self.class_name} '{self.name}'"

    def unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"{self}: {what} is not supported by the numpy engine")

    def refuse(self, *options: str) -> None:
        """Each option must be off (false, null or absent) in the config."""
        for option in options:
            if self.config.get(option):
                raise self.unsupported(f"{option}={self.config[option]!r}")

    def weights_shaped(self, *shapes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        actual = tuple(w.shape for w in self.weights)
        if actual != shapes:
            raise Unsupported(f"{self}: weights of shapes {list(actual)} where the config implies {list(shapes)}")
        other = sorted({str(w.dtype) for w in self.weights} - {"float32"})
        if other:
            raise self.unsupported(f"weight dtype {'/'.join(other)}")
        return self.weights

    def last_dim(self, shape: Shape) -> int:
        if not shape or shape[-1] is None:
            raise Unsupported(f"{self}: its input {(None, *shape)} has no fixed last dimension")
        return int(shape[-1])


@dataclass(frozen=True)
class Step:
    """A built layer: its function on a batch, its output shape, and its name in the debug line ("": none)."""

    call: Callable[[np.ndarray], np.ndarray]
    shape: Shape
    label: str = ""
    # Per timestep, for a layer that can run in step with the one before it: each timestep's output from
    # each timestep's input, in time order, both (features, batch) (recurrent.py) and each output valid
    # until the next is asked for; None for the rest.
    over_time: Callable[[Iterable[np.ndarray]], Iterator[np.ndarray]] | None = None
    recurrent: bool = False
