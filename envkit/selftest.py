"""The self-test that runs INSIDE an image (standard library and torch only, on the image's own Python):

    python /opt/envkit/selftest.py --quick --json

Checks torch and its device, then decodes with a tiny decoder-only model built from random weights
(no downloads, fixed output length) and reports tokens/s and time to first token.
Exit 0 when every check passes, 1 otherwise. One JSON document on stdout with --json.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings


def _tiny_decoder(torch, vocab: int, hidden: int, layers: int, heads: int, device: str):
    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(4096, hidden)
            layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, ids):
            n = ids.shape[1]
            x = self.embed(ids) + self.pos(torch.arange(n, device=ids.device))[None]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
            return self.head(self.blocks(x, mask=mask, is_causal=True))

    torch.manual_seed(0)
    return Tiny().to(device).eval()


def decode(torch, device: str, prompt_len: int, new_tokens: int) -> dict:
    model = _tiny_decoder(torch, vocab=1024, hidden=256, layers=4, heads=4, device=device)
    ids = torch.randint(0, 1024, (1, prompt_len), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.inference_mode():
        model(ids)  # warm-up
        sync()
        start = time.perf_counter()
        first = None
        for _ in range(new_tokens):
            nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
            if first is None:
                sync()
                first = time.perf_counter() - start
        sync()
        total = time.perf_counter() - start
    return {"model": "tiny-random (4 layers, hidden 256, vocab 1024)", "prompt_len": prompt_len, "new_tokens": new_tokens,
            "tokens_per_s": round(new_tokens / total, 2), "ttft_ms": round(first * 1e3, 2),
            "tpot_ms": round((total - first) / max(1, new_tokens - 1) * 1e3, 2)}


def arch_runs(cc: tuple, archs: list) -> bool:
    """SASS for sm_XY runs on the same major with a higher minor; PTX compute_XY JITs on anything newer."""
    for a in archs:
        digits = a.split("_")[-1]
        if not digits.isdigit():
            continue
        major, minor = int(digits[:-1]), int(digits[-1])
        if a.startswith("sm_") and major == cc[0] and minor <= cc[1]:
            return True
        if a.startswith("compute_") and (major, minor) <= tuple(cc):
            return True
    return False


def run(quick: bool) -> dict:
    doc: dict = {"schema": 1, "python": platform.python_version(), "checks": [], "decode": None}
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except Exception as exc:  # an image without torch is the finding, not a crash
        doc["checks"].append({"name": "torch imports", "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
        doc["ok"] = False
        return doc
    doc["torch"] = torch.__version__
    doc["checks"].append({"name": "torch imports", "ok": True, "detail": torch.__version__})
    device = "cpu"
    if torch.cuda.is_available():
        device = "cuda"
        cc = torch.cuda.get_device_capability(0)
        arch = f"sm_{cc[0]}{cc[1]}"
        archs = torch.cuda.get_arch_list()
        ok = arch_runs(cc, archs)
        doc["checks"].append({"name": "GPU arch in torch's build", "ok": ok, "detail": f"{torch.cuda.get_device_name(0)} {arch}; torch has {' '.join(archs)}"})
    doc["device"] = device
    try:
        doc["decode"] = decode(torch, device, prompt_len=16, new_tokens=32 if quick else 128)
        ok = doc["decode"]["tokens_per_s"] > 0
        doc["checks"].append({"name": "decode", "ok": ok, "detail": f"{doc['decode']['tokens_per_s']} tokens/s on {device}"})
    except Exception as exc:
        doc["checks"].append({"name": "decode", "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
    doc["ok"] = all(c["ok"] for c in doc["checks"])
    return doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="envkit self-test (runs inside an image)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    doc = run(a.quick)
    if a.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        for c in doc["checks"]:
            sys.stdout.write(f"{'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}\n")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
