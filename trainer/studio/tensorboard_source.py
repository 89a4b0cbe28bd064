"""TensorBoard event files as runs to import, read by TensorBoard's own reader (docs/importers.md#tensorboard).

Every folder under the log directory that holds event files is one run, as TensorBoard shows it:
its scalars become metric points, its hyperparameters (``add_hparams``) params, its text and
histograms files of the run (``tensorboard/text/<tag>.jsonl``, ``tensorboard/histograms/<tag>.jsonl``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.studio.import_target import Point, SourceRun

EVENT_FILE_MARK = "tfevents"
SCALARS_PLUGIN, TEXT_PLUGIN, HPARAMS_PLUGIN = "scalars", "text", "hparams"


def run_folders(root: Path) -> list[Path]:
    """The folders under ``root`` (itself included) that hold event files, in path order."""
    found = {path.parent for path in root.rglob(f"*{EVENT_FILE_MARK}*") if path.is_file()}
    return sorted(found)


def source_of(folder: Path) -> str:
    return f"tensorboard:{folder.resolve()}"


def read_run(root: Path, folder: Path) -> SourceRun:
    from tensorboard.backend.event_processing import event_accumulator as ea

    accumulator = ea.EventAccumulator(
        str(folder), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0, ea.HISTOGRAMS: 0}
    )
    accumulator.Reload()
    tags = accumulator.Tags()
    points = [
        Point(tag, float(event.value), int(event.wall_time * 1000), int(event.step))
        for tag in tags[ea.SCALARS]
        for event in accumulator.Scalars(tag)
    ]
    texts: dict[str, list[dict[str, Any]]] = {}
    for tag in tags[ea.TENSORS]:
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        if plugin == SCALARS_PLUGIN:
            points += [_tensor_point(tag, event) for event in accumulator.Tensors(tag)]
        elif plugin == TEXT_PLUGIN:
            texts[tag] = [_text_line(event) for event in accumulator.Tensors(tag)]
    times = [p.timestamp_ms for p in points] or [int(folder.stat().st_mtime * 1000)]
    relative = folder.relative_to(root).as_posix()
    artifacts = [_jsonl(f"tensorboard/text/{tag}.jsonl", lines) for tag, lines in texts.items()]
    artifacts += [
        _jsonl(
            f"tensorboard/histograms/{tag}.jsonl", [_histogram_line(e) for e in accumulator.Histograms(tag)]
        )
        for tag in tags[ea.HISTOGRAMS]
    ]
    return SourceRun(
        source=source_of(folder),
        name=root.resolve().name if relative == "." else relative,
        start_ms=min(times),
        end_ms=max(times),
        params=_hparams(accumulator),
        tags={"tensorboard.logdir": str(folder.resolve())},
        points=points,
        artifacts=artifacts,
    )


def _tensor_point(tag: str, event: Any) -> Point:
    from tensorboard.util import tensor_util

    value = float(tensor_util.make_ndarray(event.tensor_proto).item())
    return Point(tag, value, int(event.wall_time * 1000), int(event.step))


def _text_line(event: Any) -> dict[str, Any]:
    from tensorboard.util import tensor_util

    values = tensor_util.make_ndarray(event.tensor_proto).flatten().tolist()
    text = "\n".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values)
    return {"step": int(event.step), "wall_time": event.wall_time, "text": text}


def _histogram_line(event: Any) -> dict[str, Any]:
    histogram = event.histogram_value
    return {
        "step": int(event.step),
        "wall_time": event.wall_time,
        "min": histogram.min,
        "max": histogram.max,
        "num": histogram.num,
        "sum": histogram.sum,
        "sum_squares": histogram.sum_squares,
        # The last bucket's limit is float max (DBL_MAX): JSON takes it, but not an infinity.
        "bucket_limit": [v if math.isfinite(v) else None for v in histogram.bucket_limit],
        "bucket": list(histogram.bucket),
    }


def _jsonl(path: str, lines: list[dict[str, Any]]) -> tuple[str, Callable[[], bytes]]:
    return path, lambda: "".join(json.dumps(line) + "\n" for line in lines).encode()


def _hparams(accumulator: Any) -> dict[str, str]:
    """The session's hyperparameters (``add_hparams``), each as text."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    try:
        contents = accumulator.PluginTagToContent(HPARAMS_PLUGIN)
    except KeyError:  # the run has none
        return {}
    params: dict[str, str] = {}
    for content in contents.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.WhichOneof("data") != "session_start_info":
            continue
        for name, value in data.session_start_info.hparams.items():
            kind = value.WhichOneof("kind")
            raw = getattr(value, kind) if kind else ""
            params[name] = str(int(raw)) if kind == "number_value" and float(raw).is_integer() else str(raw)
    return params
