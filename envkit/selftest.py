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


# Decoder shapes of the models the seeds measured, built from config with random weights (no downloads).
# qwen-7b: Qwen-7B's dimensions (hidden 4096, 32 layers, MLP 11008, vocab 151936) on the Llama architecture.
SHAPES = {
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, vocab_size=32000),
    "qwen-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, vocab_size=151936),
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=1024),
}
PASS_BANDWIDTH = 0.5  # a healthy HBM GPU streams a GEMV at well over half its peak


def peak_bandwidth_gbs(default: float = 0.0) -> float:
    """The GPU's HBM peak from the image's solution (written by envkit generate), if there is one."""
    try:
        with open("/opt/envkit/solution.json") as f:
            gpu = json.load(f).get("gpu") or {}
        return float(gpu.get("bandwidth_gbs") or default)
    except (OSError, ValueError):
        return default


def check_bandwidth(torch, peak_gbs: float) -> dict:
    n = 8192
    rows = int(4e9 / 2 / n)  # a 4 GB bf16 matrix: far larger than any cache
    w = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.mv(w, x)
    torch.cuda.synchronize()
    iters = 20
    t0 = time.perf_counter()
    for _ in range(iters):
        torch.mv(w, x)
    torch.cuda.synchronize()
    gbs = w.numel() * 2 * iters / (time.perf_counter() - t0) / 1e9
    del w
    torch.cuda.empty_cache()
    pct = gbs / peak_gbs if peak_gbs else None
    ok = pct is None or pct >= PASS_BANDWIDTH
    return {"name": "memory bandwidth (GEMV)", "ok": ok, "gbs": round(gbs, 1), "peak_gbs": peak_gbs or None,
            "detail": f"{gbs:.0f} GB/s" + (f", {pct:.0%} of the {peak_gbs:.0f} GB/s peak (pass: >= {PASS_BANDWIDTH:.0%})" if pct else ", peak unknown")}


def check_flash_attn(torch) -> dict | None:
    try:
        from flash_attn import flash_attn_func
    except ImportError:
        return None
    import torch.nn.functional as F

    q, k, v = (torch.randn(4, 2048, 32, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    err = float((out.float() - ref.float()).abs().max())

    def timed(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / 10

    fa = timed(lambda: flash_attn_func(q, k, v, causal=True))
    sdpa = timed(lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True))
    flops = 4 * 4 * 32 * 2048 * 2048 * 128 / 2
    return {"name": "flash-attn vs SDPA", "ok": err < 2e-2, "max_abs_err": err,
            "detail": f"max abs error {err:.4f} (bf16); {flops / fa / 1e12:.0f} TFLOP/s vs SDPA {flops / sdpa / 1e12:.0f}"}


def check_kernels(torch) -> list:
    out = []
    try:
        import rotary_emb
    except ImportError:
        rotary_emb = None
    if rotary_emb is not None:
        b, s, h, d = 8, 4096, 32, 128
        ang = torch.outer(torch.arange(s, device="cuda", dtype=torch.float32),
                          1.0 / (10000 ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d)))
        x = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        cos, sin = ang.cos().bfloat16(), ang.sin().bfloat16()
        o = torch.empty_like(x)
        rotary_emb.apply_rotary(x[..., :d // 2], x[..., d // 2:], cos[:, None], sin[:, None], o[..., :d // 2], o[..., d // 2:], False)
        x1, x2, c, sn = x[..., :d // 2].float(), x[..., d // 2:].float(), cos.float()[:, None], sin.float()[:, None]
        ref = torch.cat([x1 * c - x2 * sn, x1 * sn + x2 * c], -1)
        err = float((o.float() - ref).abs().max())
        out.append({"name": "csrc rotary_emb vs float32", "ok": err < 0.1, "detail": f"max abs error {err:.4f} (bf16)"})
    try:
        import dropout_layer_norm
    except ImportError:
        dropout_layer_norm = None
    if dropout_layer_norm is not None:
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.float32)
        g, bta = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
        z = dropout_layer_norm.dropout_add_ln_fwd(x, None, g, bta, None, None, None, None, 0.0, 1e-5, 1.0, 0, None, False, False)[0]
        err = float((z - torch.nn.functional.layer_norm(x, (4096,), g, bta, 1e-5)).abs().max())
        out.append({"name": "csrc dropout_layer_norm vs float32", "ok": err < 1e-3, "detail": f"max abs error {err:.2e} (fp32)"})
    return out


def decode_shape(torch, shape: str, engine: str, new_tokens: int, peak_gbs: float) -> dict:
    """Batch-1 decode of a random-weight model of the given shape with transformers: eager or static cache."""
    import transformers

    cfg = transformers.LlamaConfig(**SHAPES[shape], max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ids = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda")
    kw = dict(do_sample=False, pad_token_id=0)
    if engine == "hf-static":
        kw["cache_implementation"] = "static"

    def gen(n: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    t_warm = gen(new_tokens)  # first call (static cache: compiles)
    tn = gen(new_tokens)
    with torch.inference_mode():  # time to first token: the prefill forward over the prompt
        model(ids)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(ids)
        torch.cuda.synchronize()
        t1 = time.perf_counter() - t0
    tpot = (tn - t1) / (new_tokens - 1)
    roofline = peak_gbs * 1e9 / nbytes if peak_gbs else None
    del model
    torch.cuda.empty_cache()
    return {"shape": shape, "engine": engine, "weights_gb": round(nbytes / 1e9, 2), "new_tokens": new_tokens,
            "tokens_per_s": round(1 / tpot, 1), "ttft_ms": round(t1 * 1e3, 1), "tpot_ms": round(tpot * 1e3, 2),
            "first_call_s": round(t_warm, 1), "roofline_tokens_per_s": round(roofline, 1) if roofline else None,
            "pct_of_roofline": round(100 / tpot / roofline, 1) if roofline else None}


def _nccl_worker(rank: int, world: int, port: int, size_mb: int, queue) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    x = torch.ones(size_mb * 2**20 // 4, device="cuda", dtype=torch.float32)
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    iters = 20
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    if rank == 0:
        algbw = x.numel() * 4 / dt / 1e9
        queue.put({"gpus": world, "size_mb": size_mb, "time_ms": round(dt * 1e3, 3), "algbw_gbs": round(algbw, 1),
                   "busbw_gbs": round(algbw * 2 * (world - 1) / world, 1)})
    dist.destroy_process_group()


def check_nccl(torch, size_mb: int = 1024) -> dict | None:
    """All-reduce bus bandwidth across this host's GPUs, with nccl-tests' busbw definition (algbw x 2(n-1)/n)."""
    world = torch.cuda.device_count()
    if world < 2:
        return None
    import socket
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_nccl_worker, args=(r, world, port, size_mb, queue)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    res = queue.get(timeout=5) if not queue.empty() else None
    if res is None:
        return {"name": "NCCL all-reduce", "ok": False, "detail": f"the workers exited with {[p.exitcode for p in procs]}"}
    return {"name": "NCCL all-reduce", "ok": res["busbw_gbs"] > 0, **res,
            "detail": f"{world} GPUs, {size_mb} MB fp32: bus bandwidth {res['busbw_gbs']} GB/s (algbw {res['algbw_gbs']})"}


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


def run(quick: bool, shapes: tuple = (), engines: tuple = ("hf",), peak_gbs: float = 0.0) -> dict:
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
    if device == "cuda":
        peak = peak_gbs or peak_bandwidth_gbs()
        for check in (lambda: [check_bandwidth(torch, peak)], lambda: [c for c in [check_flash_attn(torch)] if c], lambda: check_kernels(torch),
                      lambda: [c for c in [check_nccl(torch)] if c]):
            try:
                doc["checks"].extend(check())
            except Exception as exc:
                doc["checks"].append({"name": "GPU check", "ok": False, "detail": f"{type(exc).__name__}: {str(exc)[:200]}"})
        doc["models"] = []
        for shape in shapes:
            for engine in engines:
                try:
                    doc["models"].append(decode_shape(torch, shape, engine, 32 if quick else 128, peak))
                    sys.stderr.write("selftest: " + json.dumps(doc["models"][-1]) + "\n")
                    sys.stderr.flush()
                except Exception as exc:
                    doc["checks"].append({"name": f"decode {shape} {engine}", "ok": False, "detail": f"{type(exc).__name__}: {str(exc)[:200]}"})
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
    p.add_argument("--shape", action="append", default=[], choices=sorted(SHAPES), help="decode a random-weight model of this shape (GPU)")
    p.add_argument("--engine", action="append", default=[], choices=["hf", "hf-static"])
    p.add_argument("--peak-gbs", type=float, default=0.0, help="the GPU's HBM peak, when no /opt/envkit/solution.json says it")
    a = p.parse_args(argv)
    doc = run(a.quick, tuple(a.shape), tuple(a.engine) or ("hf",), a.peak_gbs)
    if a.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        for c in doc["checks"]:
            sys.stdout.write(f"{'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}\n")
        for mdl in doc.get("models", []):
            sys.stdout.write(f"     {mdl['shape']} {mdl['engine']}: {mdl['tokens_per_s']} tok/s, TTFT {mdl['ttft_ms']} ms, "
                             f"{mdl['pct_of_roofline']}% of {mdl['roofline_tokens_per_s']} tok/s roofline\n")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
