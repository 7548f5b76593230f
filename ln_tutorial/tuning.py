"""Launch configurations as data: one table per GPU model, a rule for every other GPU.

A table is ``data/tuning/<gpu>.json`` (the device name in lower case, words joined by ``-``), written by
``tools/tune.py`` with the evidence beside each entry, which :func:`ln_tutorial.explain` shows. Other GPUs
get :func:`generic_table`, from the model the measured tables follow: rows held whole in registers up to
64 KB of input in the forward, 32 KB in the backward (half an SM's register file on every NVIDIA GPU
since Volta), wider ones looped or shared by programs; short rows packed into tiles of a few kilobytes;
8 warps a tile (4 for rows of 2 KB and less, 16 for the forward's 64 KB rows); three tiles in flight in
the backward. ``LN_TUTORIAL_TUNING=<name>`` (a table's file name, or ``generic``) picks a table for
every GPU; the interpreter takes the H100 table, so that the CPU tests exercise its configurations.
"""

import functools
import json
import os
import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple

import torch

TABLES = Path(__file__).parent / "data" / "tuning"
INTERPRETER_TABLE = "nvidia-h100-80gb-hbm3"
MAX_FUSED_FWD_BYTES = 65536  # forward rows held whole in registers, in bytes of input
MAX_FUSED_BWD_BYTES = 32768  # the same in the backward


class ForwardConfig(NamedTuple):
    looped: bool  # two sweeps over a row too wide for registers
    block_m: int  # rows per program (fused) -- 1 when looped
    block_n: int  # power of two covering the row, the loop step, or (two tiles) the first tile
    num_warps: int
    tail_n: int = 0  # two tiles (variant): the second tile's width, a power of two
    params_first: bool = False  # w and b loaded beside x, not after the sums (few rows: latency-bound)


class BackwardConfig(NamedTuple):
    looped: bool  # wide rows: dx kernel with two sweeps, separate dW/dB kernel
    block_m: int  # rows per loop step
    block_n: int  # power of two covering the row, or the loop step
    num_warps: int
    programs_per_sm: int  # persistent grid size = SMs * programs_per_sm
    num_stages: int = 1  # tiles in flight per program (software pipelining)
    reload: bool = False  # read each tile twice rather than hold it across the row sums
    one_launch: bool = True  # small inputs on a GPU: the same launch adds up dW/dB (variant)
    tail_n: int = 0  # a second tile of this width (a power of two) for the columns past block_n
    split: bool = False  # wide rows (variant): cdiv(N, block_n) programs share each row
    cluster: bool = False  # the programs sharing a row are a thread-block cluster (variant, with split)


class Padded(NamedTuple):
    """An entry for half-precision rows that a power-of-two tile pads: rows of up to ``longest`` values."""

    longest: int
    config: tuple  # a ForwardConfig or BackwardConfig; with two_tiles, block_n and tail_n are set per row
    two_tiles: bool
    evidence: str


class Table(NamedTuple):
    name: str
    forward: Dict[int, ForwardConfig]  # by padded row bytes
    forward_looped: ForwardConfig
    forward_padded: Dict[int, List[Padded]]  # by padded row bytes, first match wins
    backward: Dict[int, BackwardConfig]
    backward_looped: BackwardConfig
    backward_split: Dict[int, BackwardConfig]  # by element size
    backward_padded: Dict[int, List[Padded]]
    backward_cluster: Dict[int, BackwardConfig]  # half-precision shared rows, by padded row bytes
    evidence: Dict[Tuple[str, int], str]  # (section, key) -> why


def _forward(entry: dict, looped: bool = False) -> ForwardConfig:
    return ForwardConfig(
        entry.get("looped", looped), entry.get("block_m", 1), entry.get("block_n", 0), entry["num_warps"]
    )


def _backward(entry: dict, looped: bool = False) -> BackwardConfig:
    return BackwardConfig(
        looped, entry.get("block_m", 1), entry.get("block_n", 0), entry["num_warps"], entry["programs_per_sm"],
        entry.get("num_stages", 1), entry.get("reload", False), entry.get("one_launch", True),
        split=entry.get("split", False),
    )  # fmt: skip


def parse(name: str, data: dict) -> Table:
    """A :class:`Table` from a table file's contents."""
    evidence = {}

    def keyed(section, build):
        configs = {}
        for key, entry in data.get(section, {}).items():
            configs[int(key)] = build(entry)
            evidence[(section, int(key))] = entry.get("evidence", "")
        return configs

    def padded(section, build):
        return {
            int(key): [Padded(e["longest"], build(e), e.get("two_tiles", False), e.get("evidence", "")) for e in entries]
            for key, entries in data.get(section, {}).items()
        }

    evidence[("forward_looped", 0)] = data["forward_looped"].get("evidence", "")
    evidence[("backward_looped", 0)] = data["backward_looped"].get("evidence", "")
    return Table(
        name, keyed("forward", _forward), _forward(data["forward_looped"], looped=True),
        padded("forward_padded", _forward), keyed("backward", _backward), _backward(data["backward_looped"], True),
        keyed("backward_split", _backward), padded("backward_padded", _backward),
        keyed("backward_cluster", lambda entry: _backward(entry)._replace(split=True, cluster=True)), evidence,
    )  # fmt: skip


def generic_table() -> Table:
    """The table of a GPU without one, from the model in this module's docstring."""
    data = {"forward": {}, "backward": {}, "forward_padded": {}}
    for row_bytes in (2048, 4096, 8192, 16384, 32768, 65536):
        warps = 4 if row_bytes <= 2048 else 16 if row_bytes == MAX_FUSED_FWD_BYTES else 8
        data["forward"][str(row_bytes)] = {"block_m": 2 if row_bytes <= 8192 else 1, "num_warps": warps,
                                           "evidence": "generic rule"}  # fmt: skip
    for row_bytes in (2048, 4096, 8192, 16384, 32768):
        widest = row_bytes == MAX_FUSED_BWD_BYTES
        data["backward"][str(row_bytes)] = {
            "block_m": min(4, max(1, 16384 // row_bytes)), "num_warps": 4 if row_bytes <= 2048 else 8,
            "programs_per_sm": 1, "num_stages": 1 if widest else 3, "reload": widest, "evidence": "generic rule",
        }  # fmt: skip
    # Loops and split rows depend on the register file, not the GPU model: the measured ones.
    measured = json.loads((TABLES / f"{INTERPRETER_TABLE}.json").read_text())
    for section in ("forward_looped", "backward_looped", "backward_split"):
        data[section] = measured[section]
    one_tile = {**data["backward"]["32768"], "block_n": 16384, "longest": 12288}  # half rows up to 12288: one tile
    shared = {**measured["backward_split"]["2"], "split": True, "longest": 16384, "evidence": "generic rule"}
    data["backward_padded"] = {"32768": [one_tile, shared]}
    return parse("generic", data)


def gpu_name(device: int) -> str:
    """The table name of CUDA device ``device``: its name in lower case, words joined by ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")


@functools.lru_cache(maxsize=None)
def load(name: str) -> Table:
    """The table called ``name`` (``generic``, or a file in ``data/tuning``); the generic one if there is no such file."""
    path = TABLES / f"{name}.json"
    if name == "generic" or not path.exists():
        return generic_table()
    return parse(name, json.loads(path.read_text()))


@functools.lru_cache(maxsize=None)
def table_for(device: int) -> Table:
    """The table for CUDA device ``device`` (-1: the interpreter)."""
    chosen = os.environ.get("LN_TUTORIAL_TUNING")
    if chosen:
        return load(chosen)
    return load(INTERPRETER_TABLE if device < 0 else gpu_name(device))
