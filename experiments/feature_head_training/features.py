"""Feature extraction: teacher-forced target forwards over the committed teacher rounds, one file set per round."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from rsd.models.embedded import embedded_target_dir

TEACHER_DIR = Path(__file__).resolve().parent.parent / "teacher_v2"

TOPK = 32
LAYERS = {"low": 2, "mid": 15, "high": 27}  # hidden_states indices (0 = embeddings) for the EAGLE-3 concatenation


def round_sequences(npz: Path) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """A round's prompt+answer token sequences, prompt lengths and styles."""
    z = np.load(npz)
    bounds = np.cumsum(np.concatenate([[0], z["prompt_len"] + z["answer_len"]]))
    seqs = [z["tokens"][bounds[i]:bounds[i + 1]].astype(np.int64) for i in range(len(z["style"]))]
    return seqs, z["prompt_len"].astype(np.int64), [str(s) for s in z["style"]]


def load_target(dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(embedded_target_dir(), dtype=dtype).eval()


@torch.inference_mode()
def extract_round(target, npz: Path, out: Path, batch_tokens: int) -> int:
    """Write one round's features to `out` (a directory renamed into place when complete); returns its tokens."""
    seqs, _, _ = round_sequences(npz)
    total = sum(len(s) for s in seqs)
    hidden = target.config.hidden_size
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    arrays = {name: np.lib.format.open_memmap(tmp / f"{name}.npy", "w+", np.uint16, (total, hidden))
              for name in ("last", *LAYERS)}
    top_idx = np.lib.format.open_memmap(tmp / "top_idx.npy", "w+", np.int32, (total, TOPK))
    top_logp = np.lib.format.open_memmap(tmp / "top_logp.npy", "w+", np.float16, (total, TOPK))
    offsets = np.cumsum([0] + [len(s) for s in seqs])
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    start = 0
    while start < len(order):
        width = len(seqs[order[start]])
        stop = start + 1
        while stop < len(order) and len(seqs[order[stop]]) * (stop - start + 1) <= batch_tokens:
            stop += 1
        group = order[start:stop]
        width = max(len(seqs[i]) for i in group)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(group):
            ids[row, :len(seqs[i])] = torch.from_numpy(seqs[i])
            mask[row, :len(seqs[i])] = 1
        out_h = target.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        last = out_h.last_hidden_state
        logp = torch.log_softmax(target.lm_head(last).float(), -1)
        v, k = logp.topk(TOPK, -1)
        for row, i in enumerate(group):
            n, a = len(seqs[i]), offsets[i]
            arrays["last"][a:a + n] = last[row, :n].to(torch.bfloat16).view(torch.uint16).numpy()
            for name, layer in LAYERS.items():
                arrays[name][a:a + n] = out_h.hidden_states[layer][row, :n].to(torch.bfloat16).view(
                    torch.uint16).numpy()
            top_idx[a:a + n] = k[row, :n].to(torch.int32).numpy()
            top_logp[a:a + n] = v[row, :n].to(torch.float16).numpy()
        start = stop
    for arr in (*arrays.values(), top_idx, top_logp):
        arr.flush()
    del arrays, top_idx, top_logp
    shutil.copy(npz, tmp / "tokens.npz")
    os.replace(tmp, out)
    return total


def stage_extract(work: Path, dtype: torch.dtype, batch_tokens: int, max_rounds: int) -> None:
    target = load_target(dtype)
    rounds = sorted(TEACHER_DIR.glob("round-*.npz"))[: max_rounds or None]
    t0, cpu0, done = time.time(), time.process_time(), 0
    for npz in rounds:
        out = work / "features" / npz.stem
        if (out / "tokens.npz").is_file():
            continue
        done += extract_round(target, npz, out, batch_tokens)
        print(f"[extract] {npz.stem}: {done} tokens, {done / (time.time() - t0):.0f} tok/s, "
              f"{(time.process_time() - cpu0) / 3600:.2f} CPU-h", flush=True)
    print(f"[extract] all {len(rounds)} rounds in {work / 'features'}", flush=True)
