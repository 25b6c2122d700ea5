"""Recorded NVML: a recorder that passes every call through to a library at the pynvml surface
(real NVML, or the fake) and writes each one down, and a replay that answers the same calls
from such a recording with the same shapes.

A recording is plain JSON (docs/simulate.md, "Recorded from a real GPU"): ``calls``, one entry
per call in the order made — the function, its arguments normalised (device handles as labels
``gpu0``, ``gpu0/mig1``, ``gpu0/gi2``; GPM samples as ``gpm:<device>``; ctypes out-arguments by
their type and size), and its result (ctypes structures as their fields, recursively; unions as
their bytes; NVMLError as its code and name), the out-arguments as NVML left them, and the time
the call took in ns; ``attrs``, the constants the exporter looked up on the library;
``missing``, the functions it looked for that the library lacks. Arrays drop their trailing
zero items (:func:`compact`, their ``length`` kept).

:class:`Replay` answers a call from the recorded answers to the same normalised call, in the
order recorded, the last one again once they run out (so counters never go back). A call that
was never recorded is an error: the replay is no stand-in for what was not seen.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.nvml.boundary import handle_key
from exporter.nvml.library import lib as pynvml

FORMAT = 1
# functions whose result is a handle, and the label it gets
_HANDLE_MAKERS: dict[str, Callable[[list[Any]], str]] = {
    "nvmlDeviceGetHandleByIndex": lambda args: f"gpu{args[0]}",
    "nvmlDeviceGetMigDeviceHandleByIndex": lambda args: f"{args[0]}/mig{args[1]}",
    "nvmlDeviceGetGpuInstanceById": lambda args: f"{args[0]}/gi{args[1]}",
    "nvmlEventSetCreate": lambda args: "events",
    "nvmlGpmSampleAlloc": lambda args: "gpm",
}
# Calls that only let go of something: answered (None) also where the recording ended before
# them, as it does when it is taken while the exporter still runs.
_RELEASES = frozenset({"nvmlShutdown", "nvmlEventSetFree", "nvmlGpmSampleFree"})
_SAMPLE_FILLERS = {"nvmlGpmSampleGet": 1, "nvmlGpmMigSampleGet": 2}  # position of the sample


class NotRecorded(LookupError):
    """The replay was asked something the recording does not hold."""


@dataclass(frozen=True, slots=True)
class ReplayHandle:
    """A device, MIG device, GPU instance or event set of a replay (real NVML: a pointer)."""

    label: str


class Labels:
    """Handle <-> label, for the recorder (real or fake handles) and the replay alike."""

    def __init__(self) -> None:
        self._by_key: dict[Any, str] = {}
        self._kept: list[Any] = []  # objects named by identity stay alive (ids are not reused)
        self._lock = threading.Lock()

    @staticmethod
    def _key(obj: Any) -> Any:
        try:
            key = handle_key(obj)
            hash(key)
        except Exception:
            return ("id", id(obj))
        return key

    def name(self, obj: Any, label: str) -> None:
        key = self._key(obj)
        if key is not None:
            with self._lock:
                self._by_key[key] = label
                if isinstance(key, tuple):
                    self._kept.append(obj)

    def of(self, obj: Any) -> str | None:
        if isinstance(obj, ReplayHandle):
            return obj.label
        if obj is None or isinstance(obj, int | str | bytes | float | list | tuple | dict):
            return None
        key = self._key(obj)
        return self._by_key.get(key) if key is not None else None


# -- to JSON ---------------------------------------------------------------------------------


def _is_pointer(value: Any) -> bool:
    return isinstance(value, ctypes._Pointer) or type(value).__name__ == "CArgObject"


def encode(value: Any, labels: Labels) -> Any:
    """A pynvml value as JSON: the same shape, handles as their labels."""
    label = labels.of(value) if not isinstance(value, int | str | bytes | float) else None
    if label is not None:
        return {"handle": label}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, tuple):
        return {"tuple": [encode(v, labels) for v in value]}
    if isinstance(value, list):
        return [encode(v, labels) for v in value]
    if isinstance(value, ctypes.Union):
        return {"union": type(value).__name__, "hex": bytes(value).hex()}
    if isinstance(value, ctypes.Structure):
        return {
            "struct": type(value).__name__,
            "fields": {f[0]: encode(getattr(value, f[0]), labels) for f in value._fields_},
        }
    if isinstance(value, ctypes.Array):
        return {
            "array": type(value)._type_.__name__,
            "items": [encode(v, labels) for v in value],
        }
    if type(value).__name__ == "CArgObject":  # byref(x)
        return {"byref": encode(value._obj, labels)}
    if isinstance(value, ctypes._SimpleCData):
        return encode(value.value, labels)
    if _is_pointer(value):
        return {"pointer": None}  # an opaque pointer we have no label for
    if isinstance(value, pynvml.nvmlFriendlyObject):
        return {"object": {k: encode(v, labels) for k, v in vars(value).items()}}
    return {"repr": repr(value)}


def compact(value: Any) -> Any:
    """A recorded value with each array's trailing zero items left out (``length`` keeps its
    size): a GPM request holds 210 metric slots of which the exporter fills seven."""
    if isinstance(value, list):
        return [compact(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: compact(v) for k, v in value.items()}
    if "array" in out and "items" in out:
        items = out["items"]
        try:
            zero = encode(_ctype(out["array"])(), Labels())
        except (NotRecorded, TypeError):
            return out
        out["length"] = out.get("length", len(items))
        while items and items[-1] == zero:
            items.pop()
    return out


def key_of(name: str, args: tuple[Any, ...], labels: Labels) -> str:
    """The call as a replay matches it: the function and its arguments, normalised (ctypes
    out-arguments by type and size only, not by what they hold before the call)."""
    parts = []
    for arg in args:
        if isinstance(arg, ctypes.Array):
            parts.append(f"{type(arg)._type_.__name__}[{len(arg)}]")
        elif type(arg).__name__ == "CArgObject":
            parts.append(f"&{type(arg._obj).__name__}")
        elif isinstance(arg, ctypes.Structure) and name == "nvmlGpmMetricsGet":
            ids = [int(arg.metrics[i].metricId) for i in range(int(arg.numMetrics))]
            parts.append(f"{labels.of(arg.sample1)},{labels.of(arg.sample2)},{ids}")
        else:
            parts.append(repr(encode(arg, labels)))
    return f"{name}({', '.join(parts)})"


# -- the recorder ----------------------------------------------------------------------------


class Recorder:
    """Passes every call through to ``library`` and records it (thread-safe)."""

    def __init__(self, library: Any, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._library = library
        self._clock = clock
        self._labels = Labels()
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.attrs: dict[str, Any] = {}
        self.missing: set[str] = set()  # functions the library lacks (older bindings)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._library, name, None)
        if value is None:
            self.missing.add(name)
            raise AttributeError(name)
        if not callable(value) or isinstance(value, type):
            if isinstance(value, int | str):
                self.attrs[name] = value
            return value
        return lambda *args: self._call(name, value, args)

    def _call(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        key = key_of(name, args, self._labels)
        start = self._clock()
        try:
            result = fn(*args)
        except pynvml.NVMLError as exc:
            ns = self._clock() - start
            self._append(
                {"call": name, "key": key, "ns": ns, "error": exc.value, "error_name": str(exc)}
            )
            raise
        ns = self._clock() - start
        self._name_handles(name, args, result)
        entry: dict[str, Any] = {"call": name, "key": key, "ns": ns}
        same = [i for i, a in enumerate(args) if a is result and not isinstance(a, int | str)]
        entry["result"] = {"arg": same[0]} if same else encode(result, self._labels)
        out = {
            str(i): encode(a, self._labels)
            for i, a in enumerate(args)
            if isinstance(a, ctypes.Array | ctypes.Structure) or type(a).__name__ == "CArgObject"
        }
        if out:
            entry["out"] = out
        self._append(entry)
        return result

    def _name_handles(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        make = _HANDLE_MAKERS.get(name)
        if make is not None:
            shown = [self._labels.of(a) or a for a in args]
            self._labels.name(result, make(shown))
        at = _SAMPLE_FILLERS.get(name)
        if at is not None:  # the sample now holds this device's (or GPU instance's) counters
            where = self._labels.of(args[0])
            suffix = f"/gi{args[1]}" if at == 2 else ""
            self._labels.name(args[at], f"gpm:{where}{suffix}")

    def _append(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(entry)

    def recording(self, **meta: Any) -> dict[str, Any]:
        """The recording as JSON-ready data, with ``meta`` (where, when, what)."""
        with self._lock:
            calls = list(self.calls)
        return {
            "format": FORMAT,
            "meta": meta,
            "attrs": dict(self.attrs),
            "missing": sorted(self.missing),
            "calls": [compact(c) for c in calls],
        }


# -- from JSON -------------------------------------------------------------------------------


def _ctype(name: str) -> Any:
    found = getattr(pynvml, name, None) or getattr(ctypes, name, None)
    if found is None:
        raise NotRecorded(f"no ctypes type {name} in pynvml")
    return found


def _has_handle(value: Any) -> bool:
    if isinstance(value, dict):
        return "handle" in value or any(_has_handle(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_handle(v) for v in value)
    return False


class _Object:
    """A recorded structure that holds a handle (which no ctypes field can hold here)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)


class Decoder:
    def __init__(self, handles: Callable[[str], Any]) -> None:
        self._handle = handles

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "handle" in value:
            return self._handle(value["handle"])
        if "bytes" in value:
            return value["bytes"].encode("latin-1")
        if "tuple" in value:
            return tuple(self(v) for v in value["tuple"])
        if "object" in value:
            return pynvml.nvmlFriendlyObject({k: self(v) for k, v in value["object"].items()})
        if "union" in value:
            return _ctype(value["union"]).from_buffer_copy(bytes.fromhex(value["hex"]))
        if "struct" in value:
            if _has_handle(value["fields"]):
                return _Object({k: self(v) for k, v in value["fields"].items()})
            struct = _ctype(value["struct"])()
            self.fill(struct, value)
            return struct
        if "array" in value:
            items = value["items"]
            array = (_ctype(value["array"]) * value.get("length", len(items)))()
            self.fill(array, value)
            return array
        if "pointer" in value:
            return None
        raise NotRecorded(f"cannot decode {value!r}")

    def fill(self, target: Any, value: Any) -> None:
        """Write a recorded state into a ctypes object (an out-argument, a new struct)."""
        if not isinstance(value, dict):
            target.value = self(value)
        elif "byref" in value:
            self.fill(target._obj, value["byref"])
        elif "struct" in value:
            kinds = dict((f[0], f[1]) for f in target._fields_)
            for field, recorded in value["fields"].items():
                kind = kinds[field]
                if issubclass(kind, ctypes._Pointer) or recorded is None:
                    continue  # pointers (GPM samples) stay those the caller passed
                nested = isinstance(recorded, dict) and (
                    "struct" in recorded or "array" in recorded
                )
                if nested and issubclass(kind, ctypes.Structure | ctypes.Array):
                    self.fill(getattr(target, field), recorded)
                    continue
                decoded = self(recorded)
                if isinstance(decoded, str):  # pynvml shows char arrays as str
                    decoded = decoded.encode()
                setattr(target, field, decoded)
        elif "array" in value:
            for i, item in enumerate(value["items"]):
                if isinstance(item, dict) and ("struct" in item or "array" in item):
                    self.fill(target[i], item)
                else:
                    target[i] = self(item)
        elif "union" in value:
            ctypes.memmove(
                ctypes.addressof(target), bytes.fromhex(value["hex"]), len(value["hex"]) // 2
            )
        elif isinstance(target, ctypes._SimpleCData):
            target.value = self(value)


class Replay:
    """Answers the pynvml calls of a recording (see the module's text), thread-safe."""

    def __init__(self, recording: dict[str, Any]) -> None:
        if recording.get("format") != FORMAT:
            raise ValueError(f"not a recording of format {FORMAT}")
        self.meta: dict[str, Any] = recording.get("meta", {})
        self._attrs: dict[str, Any] = recording.get("attrs", {})
        self._answers: dict[str, list[dict[str, Any]]] = {}
        self._missing: set[str] = set(recording.get("missing", []))
        for entry in recording["calls"]:
            self._answers.setdefault(entry["key"], []).append(entry)
        self._served: dict[str, int] = {}
        self._labels = Labels()
        self._handles: dict[str, ReplayHandle] = {}
        self._lock = threading.Lock()
        self._freed = threading.Event()
        self._decode = Decoder(self._handle)
        self.unrecorded: list[str] = []  # calls asked that the recording lacks (for tests)

    def _handle(self, label: str) -> ReplayHandle:
        return self._handles.setdefault(label, ReplayHandle(label))

    def __getattr__(self, name: str) -> Any:
        attrs = self.__dict__.get("_attrs", {})
        if name in attrs:
            return attrs[name]
        if name.startswith("_") or name in self._missing or not name.startswith("nvml"):
            raise AttributeError(name)
        return lambda *args: self._call(name, args)

    def _next(self, key: str) -> dict[str, Any]:
        with self._lock:
            answers = self._answers.get(key)
            if not answers:
                self.unrecorded.append(key)
                raise NotRecorded(key)
            n = self._served.get(key, 0)
            self._served[key] = n + 1
            return answers[min(n, len(answers) - 1)]

    def _call(self, name: str, args: tuple[Any, ...]) -> Any:
        if name == "nvmlGpmSampleAlloc":
            self._next(name + "()")
            sample = ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())
            self._labels.name(sample, "gpm")
            return sample
        if name == "nvmlEventSetFree":
            self._freed.set()
        key = key_of(name, args, self._labels)
        if name in _RELEASES and key not in self._answers:
            return None
        if name == "nvmlEventSetWait_v2" and key not in self._answers:
            entry: dict[str, Any] = {"error": pynvml.NVML_ERROR_TIMEOUT}  # no event was seen
        else:
            entry = self._next(key)
        if name in _SAMPLE_FILLERS:
            at = _SAMPLE_FILLERS[name]
            suffix = f"/gi{args[1]}" if at == 2 else ""
            self._labels.name(args[at], f"gpm:{self._labels.of(args[0])}{suffix}")
        if "error" in entry:
            if name == "nvmlEventSetWait_v2" and entry["error"] == pynvml.NVML_ERROR_TIMEOUT:
                self._freed.wait(args[1] / 1000)  # as NVML: no event within the time-out
            raise pynvml.NVMLError(entry["error"])
        for position, state in entry.get("out", {}).items():
            self._decode.fill(args[int(position)], state)
        result = entry["result"]
        if isinstance(result, dict) and "arg" in result:
            return args[result["arg"]]
        return self._decode(result)

    def unserved(self) -> list[str]:
        """Recorded calls the replay was never asked (what the exporter no longer calls)."""
        with self._lock:
            return sorted(k for k in self._answers if k not in self._served)
