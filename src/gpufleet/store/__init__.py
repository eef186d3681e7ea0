"""The store port (`Store`) and its in-memory implementation (`MemoryStore`)."""

from gpufleet.store.labels import SelectorError, matches, parse_selector
from gpufleet.store.memory import MemoryStore, format_time
from gpufleet.store.merge import apply_merge_patch, copy_json, copy_obj, merge_patch
from gpufleet.store.port import (
    AlreadyExists,
    Change,
    ChangeType,
    Conflict,
    Expired,
    Invalid,
    Kind,
    NotFound,
    Obj,
    Store,
    StoreError,
    kind_of,
)

__all__ = [
    "AlreadyExists",
    "Change",
    "ChangeType",
    "Conflict",
    "Expired",
    "Invalid",
    "Kind",
    "MemoryStore",
    "NotFound",
    "Obj",
    "SelectorError",
    "Store",
    "StoreError",
    "apply_merge_patch",
    "copy_json",
    "copy_obj",
    "format_time",
    "kind_of",
    "matches",
    "merge_patch",
    "parse_selector",
]
