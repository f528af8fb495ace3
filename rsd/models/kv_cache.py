"""rsd's own KV cache (batch 1, sequence dim -2), built on torch alone so that no transformers internals pin its
version.

A model's forward receives a `KVCache` as its cache: transformers' attention layers call `update`, and its mask
builders (for a forward without an explicit 4D mask) read the sizes from `get_seq_length`, `get_mask_sizes` and
`get_query_offset`, which is the whole cache protocol a decoder's forward uses. Every layer keeps all its entries
(full attention): a sliding-window layer's window comes from the mask transformers builds over the whole cache.

`BufferLayer` is the eager layer: a preallocated buffer grown by doubling, written in place, read as a view of the
filled part. `SlotLayer` is the static-shape layer: a buffer of its owner's fixed capacity, written at the owner's
slots and read whole under a mask that hides unwritten, stale and padding slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

MIN_BUFFER = 256  # a BufferLayer's first buffer holds this many entries (or twice the first write)


def move_entries(buf: torch.Tensor, prefix: int, moved: torch.Tensor) -> None:
    """Copy a [1, heads, seq, dim] buffer's entries at `moved` (ascending, all >= prefix) to [prefix, prefix + m)."""
    if len(moved):
        # index_select copies the sources first, so overlapping source/destination ranges are safe
        buf[:, :, prefix: prefix + len(moved)] = buf.index_select(2, moved.to(buf.device))


class BufferLayer:
    """One layer's keys/values: views of the filled part of a buffer grown by doubling (None before a write)."""

    def __init__(self) -> None:
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    def _view(self) -> None:
        self.keys = self._kbuf[:, :, : self.length]
        self.values = self._vbuf[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new entries after the filled part (growing the buffer when full); return the filled views."""
        need = self.length + key_states.shape[-2]
        if self._kbuf is None or need > self._kbuf.shape[-2]:
            cap = max(MIN_BUFFER, 2 * need)
            kbuf = key_states.new_empty((*key_states.shape[:-2], cap, key_states.shape[-1]))
            vbuf = value_states.new_empty((*value_states.shape[:-2], cap, value_states.shape[-1]))
            if self.length:
                kbuf[:, :, : self.length] = self._kbuf[:, :, : self.length]
                vbuf[:, :, : self.length] = self._vbuf[:, :, : self.length]
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[:, :, self.length: need] = key_states
        self._vbuf[:, :, self.length: need] = value_states
        self.length = need
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """The filled entries."""
        return self.length

    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        """Keep entries [0, prefix) and then the entries at `moved` (ascending, all >= prefix), dropping the rest."""
        if self._kbuf is None:
            return
        move_entries(self._kbuf, prefix, moved)
        move_entries(self._vbuf, prefix, moved)
        self.length = prefix + len(moved)
        self._view()


class SlotOwner(Protocol):
    """What a SlotLayer reads from its owner: the buffer capacity and the slots the current forward writes."""

    capacity: int
    slots: torch.Tensor


class SlotLayer:
    """One full-attention layer's keys/values in buffers of the owner's capacity, written at the owner's `slots` and
    returned whole (None before the first write)."""

    def __init__(self, owner: SlotOwner) -> None:
        self.owner = owner
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new entries at the owner's slots (allocating zeroed buffers first); return the buffers."""
        if self.keys is None:
            shape = (*key_states.shape[:-2], self.owner.capacity, key_states.shape[-1])
            self.keys, self.values = key_states.new_zeros(shape), value_states.new_zeros(shape)
        slots = self.owner.slots.to(key_states.device)  # layers may sit on other devices under device_map
        self.keys.index_copy_(2, slots, key_states)
        self.values.index_copy_(2, slots, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """The capacity: attention reads the whole buffer."""
        return self.owner.capacity

    def grow(self, capacity: int) -> None:
        """Move the entries into buffers of a larger `capacity` (no-op before the first write)."""
        if self.keys is not None:
            keys = self.keys.new_zeros((*self.keys.shape[:-2], capacity, self.keys.shape[-1]))
            values = self.values.new_zeros(keys.shape)
            keys[:, :, : self.keys.shape[-2]], values[:, :, : self.values.shape[-2]] = self.keys, self.values
            self.keys, self.values = keys, values

    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        """Move the entries at `moved` (ascending, all >= prefix) to slots [prefix, prefix + m); the owner keeps the
        filled length."""
        if self.keys is not None:
            move_entries(self.keys, prefix, moved)
            move_entries(self.values, prefix, moved)


class KVCache:
    """The cache a model's forward receives: one layer object per decoder layer, each with `keys`/`values`."""

    is_compileable = False  # transformers' mask builders may skip a causal mask (sdpa's is_causal) for this cache

    def __init__(self, num_layers: int, make_layer: Callable[[], BufferLayer | SlotLayer]) -> None:
        self.layers = [make_layer() for _ in range(num_layers)]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store layer `layer_idx`'s new keys/values [1, kv_heads, q, dim]; return the keys/values to attend over."""
        return self.layers[layer_idx].update(key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Entries attention reads at layer `layer_idx` before this forward's (0 for a layer past the last)."""
        return self.layers[layer_idx].get_seq_length() if layer_idx < len(self.layers) else 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        """Where this forward's queries start: after the cached entries."""
        return self.get_seq_length(layer_idx)

    def get_mask_sizes(self, query: int | torch.Tensor, layer_idx: int = 0) -> tuple[int, int]:
        """(kv_length, kv_offset) for a forward of `query` tokens (a count, or their cache positions in older
        transformers): the cached entries plus the new ones, from offset 0."""
        new = query if isinstance(query, int) else len(query)
        return self.get_seq_length(layer_idx) + new, 0

    @property
    def is_sliding(self) -> list[bool]:
        """No layer keeps a window only (see the module doc)."""
        return [False] * len(self.layers)

    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        """Every layer keeps entries [0, prefix) followed by those at `moved` (ascending, >= prefix)."""
        for layer in self.layers:  # layers may sit on different GPUs under device_map="auto"
            layer.compact(prefix, moved)
