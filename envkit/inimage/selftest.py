"""The self-test that runs INSIDE an image, on the image's own Python: the standard library and torch, plus
transformers where a model runs and vllm for its engine.

    python /opt/envkit/selftest.py --quick --json
    python /opt/envkit/selftest.py --shape llama-2-7b --engine hf --engine hf-static --parity --json
    python /opt/envkit/selftest.py --model DIR --engine hf --engine vllm --lambada lambada_test.jsonl --json

Checks torch and the GPU: arch, memory bandwidth against the HBM peak, flash-attn and the csrc kernels when
installed, NCCL across GPUs. Then it decodes at batch 1: the built-in torch decoder always (a smoke test that
needs no transformers: 4 layers, no KV cache, not the "tiny" shape), and with --shape or --model a transformers model
per engine (tokens/s, TTFT, TPOT, % of roofline). Every tokens/s here has one definition, 1/TPOT: tokens per second
after the first token (TTFT is reported apart). It can also check logits parity against a float32 eager reference
and LAMBADA last-word accuracy. Exit 0 when every check passes, 1 otherwise, 2 for bad arguments. With --json,
stdout carries one JSON document and nothing else; progress lines go to stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
import warnings

BUILTIN_DECODER = "built-in torch decoder, no KV cache (4 layers, hidden 256, vocab 1024)"
BUILTIN_POSITIONS = 4096
METRIC = "1/TPOT"  # what every tokens_per_s of the document is: tokens per second after the first
DECODE_RUNS = 3  # decode figures are the median of this many timed runs, with their min and max


def _quiet(message: str) -> None:
    pass


def _tiny_decoder(torch, vocab: int, hidden: int, layers: int, heads: int, device: str):
    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(BUILTIN_POSITIONS, hidden)
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


def decode(torch, device: str, prompt_len: int, new_tokens: int, runs: int = DECODE_RUNS) -> dict:
    """Batch-1 greedy decode of the built-in decoder (every step recomputes the whole sequence: no KV cache). Its
    tokens/s is 1/TPOT like the transformers rows', but of another, smaller model: the two are not comparable. The
    figures are the median of `runs` runs, with min and max, the threads torch used and the machine's load."""
    prompt_len = max(1, min(prompt_len, BUILTIN_POSITIONS - new_tokens))
    model = _tiny_decoder(torch, vocab=1024, hidden=256, layers=4, heads=4, device=device)
    prompt = torch.randint(0, 1024, (1, prompt_len), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    firsts, tpots = [], []
    with torch.inference_mode():
        model(prompt)  # warm-up
        for _ in range(max(1, runs)):
            ids = prompt
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
            firsts.append(first)
            tpots.append(max(total - first, 1e-9) / max(1, new_tokens - 1))
    tps = spread([1 / t for t in tpots], 2)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"model": BUILTIN_DECODER, "prompt_len": prompt_len, "new_tokens": new_tokens, "metric": METRIC, "runs": len(tpots),
            "tokens_per_s": tps["median"], "tokens_per_s_min": tps["min"], "tokens_per_s_max": tps["max"],
            "ttft_ms": round(median(firsts) * 1e3, 2), "tpot_ms": round(median(tpots) * 1e3, 2),
            "threads": torch.get_num_threads(), "load_1min": None if load is None else round(load, 2)}


# Decoder shapes of the seeds' models, built from config with random weights (no downloads). Qwen's
# config.json counts both SwiGLU halves in intermediate_size (22016, 27392): the MLP width is half.
# chatglm2-6b: GLM's dimensions (multi-query attention with 2 KV groups) on the Llama architecture.
SHAPES = {
    "llama-2-7b": {"arch": "llama", "source": "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
                   "config": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                                  vocab_size=32000)},
    "qwen-7b": {"arch": "llama", "source": "https://huggingface.co/Qwen/Qwen-7B/blob/main/config.json",
                "config": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, vocab_size=151936)},
    "qwen-14b": {"arch": "llama", "source": "https://huggingface.co/Qwen/Qwen-14B/blob/main/config.json",
                 "config": dict(hidden_size=5120, intermediate_size=13696, num_hidden_layers=40, num_attention_heads=40,
                                vocab_size=152064)},
    "chatglm2-6b": {"arch": "llama", "source": "https://huggingface.co/THUDM/chatglm2-6b/blob/main/config.json",
                    "config": dict(hidden_size=4096, intermediate_size=13696, num_hidden_layers=28, num_attention_heads=32,
                                   num_key_value_heads=2, vocab_size=65024)},
    "bloom-7b1": {"arch": "bloom", "source": "https://huggingface.co/bigscience/bloom-7b1/blob/main/config.json",
                  "config": dict(hidden_size=4096, n_layer=30, n_head=32, vocab_size=250880)},
    "tiny": {"arch": "llama", "source": "envkit (a CPU-sized Llama)",
             "config": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=1024)},
}
DECODERS = ("hf", "hf-static", "vllm")  # the decode back ends of --engine (not the serving engines of engine_specs)
# of the GPU's published HBM peak: a healthy H200 streamed 84-90 % of it (median of reps) over three calls of one day
# (docs/selftest-h200.md); 80 % leaves that spread room and still fails a card that lost a fifth of its bandwidth
PASS_BANDWIDTH = 0.80
BANDWIDTH_BYTES = 4_000_000_000  # 4 GB of bf16: far larger than any cache
BANDWIDTH_REPS = 9
SOLUTION_PATH = "/opt/envkit/solution.json"


def peak_bandwidth_gbs(default: float = 0.0, path: str = SOLUTION_PATH) -> float:
    """The GPU's HBM peak from the image's solution (written by envkit generate), if there is one."""
    try:
        with open(path) as f:
            gpu = json.load(f).get("gpu") or {}
        return float(gpu.get("bandwidth_gbs") or default)
    except (OSError, ValueError, AttributeError):
        return default


def resolve_peak(peak_gbs: float, gpu_name: str, lookup=None, path: str = SOLUTION_PATH) -> tuple:
    """(peak GB/s, where it came from): --peak-gbs, else the image's solution, else `lookup(gpu_name)` (the caller's
    matrix row for the GPU's NVML/torch name, as (GB/s, row name) or None); (0.0, "") when none knows it."""
    if peak_gbs:
        return float(peak_gbs), "--peak-gbs"
    sol = peak_bandwidth_gbs(0.0, path)
    if sol:
        return sol, "solution"
    found = lookup(gpu_name) if lookup and gpu_name else None
    if found and found[0]:
        return float(found[0]), f"matrix row {found[1]}"
    return 0.0, ""


def gpu_seconds(torch, fn, iters: int, warmup: int = 3) -> float:
    """Mean seconds per call of fn on the GPU, after warm-up calls, synchronised at both ends."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def event_seconds(torch, fn, reps: int = BANDWIDTH_REPS, warmup: int = 2) -> list:
    """Seconds of each of `reps` calls of fn, each timed alone with CUDA events, after warm-up calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return out


def median(values) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def bandwidth_verdict(rates: dict, peak_gbs: float, source: str = "", medians: dict | None = None) -> dict:
    """The check from the measured streaming rates (GB/s by method, each the best of its reps): the best is what the
    card streams; it passes at PASS_BANDWIDTH of the published peak, and without a peak it reports the rate and passes."""
    method, gbs = max(rates.items(), key=lambda kv: kv[1])
    pct = gbs / peak_gbs if peak_gbs else None
    ok = pct is None or pct >= PASS_BANDWIDTH
    each = ", ".join(f"{k} {v:.0f}" for k, v in rates.items())
    rule = (f"{pct:.0%} of the {peak_gbs:.0f} GB/s published peak ({source or 'given'}); pass: >= {PASS_BANDWIDTH:.0%} of it"
            if pct is not None else "peak unknown (no --peak-gbs, solution or matrix row for this GPU): not judged")
    spread = f"; medians {', '.join(f'{k} {v:.0f}' for k, v in medians.items())}" if medians else ""
    return {"name": "memory bandwidth (streaming read)", "ok": ok, "gbs": round(gbs, 1), "peak_gbs": peak_gbs or None,
            "pct_of_peak": round(100 * pct, 1) if pct is not None else None, "peak_source": source or None, "method": method,
            "rates_gbs": {k: round(v, 1) for k, v in rates.items()},
            **({"rates_median_gbs": {k: round(v, 1) for k, v in medians.items()}} if medians else {}),
            "detail": f"{gbs:.0f} GB/s by {method} (best of {BANDWIDTH_REPS} CUDA-event reps over 4 GB bf16, as STREAM reports its Best "
                      f"Rate; {each} GB/s{spread}), {rule}"}


def check_bandwidth(torch, peak_gbs: float, source: str = "") -> dict:
    """The rate a healthy card streams its memory: a read-reduction (tensor.sum) and tall-skinny matrix-vector
    products over one 4 GB bf16 buffer, each the best of CUDA-event timed reps (STREAM's convention: the fastest
    trial after warm-up is the rate the memory sustains, the slower ones the host's noise); the best of them is judged."""
    buf = torch.randn(BANDWIDTH_BYTES // 2 // 8192 * 8192, device="cuda", dtype=torch.bfloat16)  # views as N x 4096 and N x 8192
    nbytes = buf.numel() * 2
    times = {"sum": event_seconds(torch, lambda: buf.sum())}
    for cols in (4096, 8192):
        w = buf.view(-1, cols)
        x = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
        times[f"mv {w.shape[0]}x{cols}"] = event_seconds(torch, lambda: torch.mv(w, x))
    w = buf = None  # the 4 GB buffer goes before the next check
    torch.cuda.empty_cache()
    return bandwidth_verdict({k: nbytes / min(t) / 1e9 for k, t in times.items()}, peak_gbs, source,
                             medians={k: nbytes / median(t) / 1e9 for k, t in times.items()})


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

    fa = gpu_seconds(torch, lambda: flash_attn_func(q, k, v, causal=True), iters=10)
    sdpa = gpu_seconds(torch, lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                                     is_causal=True), iters=10)
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
        t0 = time.perf_counter()
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
        out.append(_timed({"name": "csrc rotary_emb vs float32", "ok": err < 0.1, "detail": f"max abs error {err:.4f} (bf16)"}, t0))
    try:
        import dropout_layer_norm
    except ImportError:
        dropout_layer_norm = None
    if dropout_layer_norm is not None:
        t0 = time.perf_counter()
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.float32)
        g, bta = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
        z = dropout_layer_norm.dropout_add_ln_fwd(x, None, g, bta, None, None, None, None, 0.0, 1e-5, 1.0, 0, None, False, False)[0]
        err = float((z - torch.nn.functional.layer_norm(x, (4096,), g, bta, 1e-5)).abs().max())
        out.append(_timed({"name": "csrc dropout_layer_norm vs float32", "ok": err < 1e-3,
                           "detail": f"max abs error {err:.2e} (fp32)"}, t0))
    return out


def _timed(check: dict, since: float) -> dict:
    """The check with the seconds it took since `since` (a time.perf_counter() reading), unless it has them."""
    check.setdefault("seconds", round(time.perf_counter() - since, 3))
    return check


def _sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def load_target(torch, target: str, device: str, dtype):
    """(model, tokenizer or None, weights directory or None) for a shape name or a local model directory."""
    import transformers

    if target in SHAPES:
        spec = SHAPES[target]
        if spec["arch"] == "bloom":
            cfg = transformers.BloomConfig(**spec["config"])
        else:
            cfg = transformers.LlamaConfig(**spec["config"], max_position_embeddings=4096)
        torch.manual_seed(0)
        with torch.device(device):
            return transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval(), None, None
    model = transformers.AutoModelForCausalLM.from_pretrained(target, dtype=dtype, local_files_only=True).to(device).eval()
    try:
        tok = transformers.AutoTokenizer.from_pretrained(target, local_files_only=True)
    except Exception:  # weights without a tokenizer: token figures only
        tok = None
    return model, tok, target


def _generate_kwargs(engine: str) -> dict:
    kw = dict(do_sample=False, pad_token_id=0)
    if engine == "hf-static":
        kw["cache_implementation"] = "static"
    return kw


def generate_seconds(torch, model, ids, engine: str, n: int, device: str) -> tuple:
    """(seconds, output) of one batch-1 greedy generate of exactly n new tokens, synchronised at both ends."""
    kw = _generate_kwargs(engine)
    _sync(torch, device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
    _sync(torch, device)
    return time.perf_counter() - t0, out


def spread(values, digits: int = 1) -> dict:
    """median, min and max of a list of figures (the decode's runs)."""
    return {"median": round(median(values), digits), "min": round(min(values), digits), "max": round(max(values), digits)}


def decode_hf(torch, model, tok, ids, engine: str, new_tokens: int, device: str, runs: int = DECODE_RUNS) -> dict:
    """Batch-1 greedy decode with transformers (eager dynamic cache, or static cache). Each run times generate() of
    1 token (TTFT: prefill and generate's own set-up) and of new_tokens; TPOT = (T(n) - T(1)) / (n - 1), so the
    set-up is not charged to the tokens after the first. Figures are the median of `runs` runs, with min and max."""
    t_warm, _ = generate_seconds(torch, model, ids, engine, new_tokens, device)  # first call (static cache: set-up)
    generate_seconds(torch, model, ids, engine, 1, device)
    tps, ttfts, tpots, out, tn = [], [], [], None, 0.0
    for _ in range(max(1, runs)):
        t1, _ = generate_seconds(torch, model, ids, engine, 1, device)
        tn, out = generate_seconds(torch, model, ids, engine, new_tokens, device)
        tpot = max(tn - t1, 1e-9) / (new_tokens - 1)
        tps.append(1 / tpot)
        ttfts.append(t1 * 1e3)
        tpots.append(tpot * 1e3)
    s = spread(tps)
    res = {"metric": METRIC, "runs": len(tps), "tokens_per_s": s["median"], "tokens_per_s_min": s["min"], "tokens_per_s_max": s["max"],
           "ttft_ms": round(median(ttfts), 1), "tpot_ms": round(median(tpots), 2),
           "first_call_s": round(t_warm, 1), "attention": model.config._attn_implementation}
    if tok is not None and out is not None:
        chars = len(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))
        res["chars_per_s"] = round(chars / max(tn - median(ttfts) / 1e3, 1e-9), 1)
    return res


def eager_references(torch, model, seq, start: int) -> tuple:
    """Eager-attention logits over seq from position start: at the model's dtype, and in float32 (a float32 copy),
    the precise reference both are measured against."""
    import copy

    impl = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            same = model(seq).logits[0, start:].float()
    finally:
        model.set_attn_implementation(impl)
    if model.dtype == torch.float32:
        return same, same
    ref_model = copy.deepcopy(model).float()
    ref_model.set_attn_implementation("eager")
    with torch.inference_mode():
        ref = ref_model(seq).logits[0, start:].float()
    del ref_model
    return same, ref


def parity_hf(torch, model, ids, engine: str, steps: int) -> dict:
    """The engine's per-step logits from generate against the float32 eager-attention reference on the same tokens,
    beside the eager path's own error at the model's dtype."""
    kw = _generate_kwargs(engine)
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=steps, min_new_tokens=steps, output_logits=True, return_dict_in_generate=True, **kw)
    got = torch.stack(out.logits, 1)[0].float()
    eager, ref = eager_references(torch, model, out.sequences[:, :-1], ids.shape[1] - 1)
    return _compare(got, eager, ref, f"{engine} ({model.config._attn_implementation} attention)")


def _compare(got, eager, ref, what: str, scale: float = 0.0, top1: tuple = ()) -> dict:
    """The accelerated path passes when it is no further from the float32 reference than twice the eager path at the
    same dtype, plus 0.1 % of the largest reference logit (the float32 floor; `scale` when the values are not logits).
    top1: (engine's picks, eager's picks, reference's picks) where the values compared are not whole logit rows."""
    scale = scale or max(float(ref.abs().max()), 1e-30)
    err, eager_err = float((got - ref).abs().max()), float((eager - ref).abs().max())
    picks = top1 or (got.argmax(-1), eager.argmax(-1), ref.argmax(-1))
    return {"what": what, "steps": int(ref.shape[0]), "max_abs_err": _sig(err), "eager_max_abs_err": _sig(eager_err),
            "allowed_abs_err": _sig(2 * eager_err + 1e-3 * scale), "ok": err <= 2 * eager_err + 1e-3 * scale,
            "top1_agree": round(float((picks[0] == picks[2]).float().mean()), 4),
            "eager_top1_agree": round(float((picks[1] == picks[2]).float().mean()), 4)}


def _sig(x: float) -> float:
    return float(f"{x:.3g}")


def decode_vllm(torch, weights_dir: str, ids, new_tokens: int, device: str, dtype_name: str) -> tuple:
    """Batch-1 greedy decode with vLLM's offline engine (LLM.generate on token ids); also its per-step logprobs."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries the JSON document
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    prompt = {"prompt_token_ids": ids[0].tolist()}
    llm = LLM(model=weights_dir, skip_tokenizer_init=True, dtype=dtype_name, max_model_len=ids.shape[1] + new_tokens + 16,
              **({"gpu_memory_utilization": 0.5} if device == "cuda" else {}))

    def gen(n: int, logprobs=None):
        sp = SamplingParams(max_tokens=n, min_tokens=n, temperature=0.0, ignore_eos=True, detokenize=False, logprobs=logprobs)
        t0 = time.perf_counter()
        out = llm.generate([prompt], sp, use_tqdm=False)[0].outputs[0]
        return time.perf_counter() - t0, out

    try:
        gen(new_tokens)  # warm-up
        t1, _ = gen(1)
        tn, out = gen(new_tokens, logprobs=0)
    finally:
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:
            pass
        llm = None  # noqa: F841 (drops the engine before the memory is released)
        _free(torch, device)
    tpot = max(tn - t1, 1e-9) / (new_tokens - 1)
    steps = [(tid, lp[tid].logprob) for tid, lp in zip(out.token_ids, out.logprobs)]
    return {"metric": METRIC, "tokens_per_s": round(1 / tpot, 1), "ttft_ms": round(t1 * 1e3, 1), "tpot_ms": round(tpot * 1e3, 2)}, steps


def parity_vllm(torch, model, ids, steps: list) -> dict:
    """vLLM's logprobs of its chosen tokens against transformers' float32 eager reference on the same token sequence."""
    seq = torch.cat([ids, torch.tensor([[t for t, _ in steps]], device=ids.device)], 1)
    eager, ref = eager_references(torch, model, seq[:, :-1], ids.shape[1] - 1)
    chosen = torch.tensor([[t] for t, _ in steps], device=ref.device)
    got = torch.tensor([[lp] for _, lp in steps], device=ref.device, dtype=torch.float32)
    eager_lp, ref_lp = (torch.log_softmax(x, -1).gather(1, chosen) for x in (eager, ref))
    return _compare(got, eager_lp, ref_lp, "vllm logprobs", scale=max(float(ref.abs().max()), 1e-30),
                    top1=(chosen[:, 0], eager.argmax(-1), ref.argmax(-1)))


def jsonl_rows(text: str):
    """(line number, value) for each non-blank line of a JSONL text; ValueError names a line that is not JSON."""
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield no, json.loads(line)
        except ValueError:
            raise ValueError(f"line {no} is not JSON") from None


def read_lambada(text: str, limit: int) -> list:
    """The texts of a LAMBADA jsonl ({"text": ...} per line); ValueError names the first bad line."""
    texts = []
    for no, row in jsonl_rows(text):
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or " " not in row["text"].strip():
            raise ValueError(f'line {no} has no "text" of at least two words')
        texts.append(row["text"].strip())
    if not texts:
        raise ValueError("it holds no texts")
    return texts[:limit] if limit else texts


def split_last_word(text: str) -> tuple:
    """LAMBADA's task: the context and the final word to predict."""
    context, _, word = text.strip().rpartition(" ")
    return context, word


def lambada_budget(tok, text: str) -> tuple:
    """(context ids, tokens to generate): as many tokens as the last word takes inside the full text, plus two, so a
    tokenizer that splits the word differently on its own (SentencePiece prepends its space marker) still fits."""
    context, word = split_last_word(text)
    ctx = tok(context).input_ids
    full = tok(context + " " + word).input_ids
    n = len(full) - len(ctx) if full[:len(ctx)] == ctx and len(full) > len(ctx) \
        else len(tok(" " + word, add_special_tokens=False).input_ids)
    return ctx, n + 2


def last_word_correct(generated: str, word: str) -> bool:
    """LAMBADA's verdict: the first word of the greedy continuation is the missing word (trailing punctuation aside)."""
    words = generated.split()
    return bool(words) and words[0].rstrip(".,;:!?\"')") == word


def lambada(torch, model, tok, texts: list, engine: str, device: str) -> dict:
    """Last-word accuracy on LAMBADA texts: greedy continuation of the context, compared word for word."""
    kw = _generate_kwargs(engine)
    correct = 0
    t0 = time.perf_counter()
    for text in texts:
        ctx, budget = lambada_budget(tok, text)
        ids = torch.tensor([ctx], device=device)
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens=budget, min_new_tokens=budget, **kw)
        correct += last_word_correct(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True), split_last_word(text)[1])
    return {"engine": engine, "examples": len(texts), "correct": correct, "accuracy": round(correct / len(texts), 4),
            "seconds": round(time.perf_counter() - t0, 2)}


def _free(torch, device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        try:
            torch._dynamo.reset()  # compiled static-cache graphs hold the weights
        except Exception:
            pass
        torch.cuda.empty_cache()


def weight_bytes_per_token(model) -> int:
    """Bytes of weights read to decode one token: all of them, less the input embedding table (one row is read)
    unless it is tied to the output head."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    if emb is not None and (head is None or head.weight.data_ptr() != emb.weight.data_ptr()):
        total -= emb.weight.numel() * emb.weight.element_size()
    return total


def failed_check(name: str, exc: BaseException, limit: int | None = 300, since: float | None = None) -> dict:
    """A check that failed because its code raised: the exception named, its message cut at `limit` characters
    (with the seconds since `since`, a time.perf_counter() reading, when given)."""
    check = {"name": name, "ok": False, "detail": f"{type(exc).__name__}: {str(exc)[:limit]}"}
    return check if since is None else _timed(check, since)


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails to import, or a module blocked in sys.modules
        return False


def measure_target(torch, target: str, engines: tuple, device: str, prompt_len: int, new_tokens: int, peak_gbs: float,
                   parity: bool, lambada_texts: tuple = (), say=_quiet) -> tuple:
    """Decode one shape or model dir with each engine: (model rows, check rows, lambada rows); progress to `say`."""
    import tempfile

    rows, checks, accuracy = [], [], []
    if "vllm" in engines and not _importable("vllm"):  # say so before the model is built, not after
        checks.append({"name": f"decode {target} vllm", "ok": False, "seconds": 0.0,
                       "detail": "vllm is not installed in this Python: install the vllm wheel the solution names, or drop --engine vllm"})
        engines = tuple(e for e in engines if e != "vllm")
        if not engines:
            return rows, checks, accuracy
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    dtype_name = str(dtype).split(".")[-1]
    say(f"building the {target} shape (random weights, {dtype_name})" if target in SHAPES else f"loading {target} ({dtype_name})")
    model, tok, weights_dir = load_target(torch, target, device, dtype)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    roofline = peak_gbs * 1e9 / weight_bytes_per_token(model) if peak_gbs else None
    torch.manual_seed(1)
    ids = torch.randint(10, model.config.vocab_size, (1, prompt_len), device=device)
    scratch = None
    for engine in engines:
        name = f"{target} {engine}"
        say(f"decoding {name}: {prompt_len} prompt tokens, {new_tokens} new" + (", then logits parity" if parity else ""))
        t0 = time.perf_counter()
        try:
            if engine == "vllm":
                if weights_dir is None:  # a shape: vLLM loads weights from disk
                    scratch = weights_dir = tempfile.mkdtemp(prefix="envkit-shape-")
                    model.save_pretrained(scratch)
                model.to("cpu")  # vLLM takes its share of GPU memory; the HF copy waits in host memory
                _free(torch, device)
                try:
                    res, steps = decode_vllm(torch, weights_dir, ids.cpu(), new_tokens, device, dtype_name)
                finally:
                    model.to(device)
                t0 = time.perf_counter()
                par = parity_vllm(torch, model, ids, steps) if parity else None
            else:
                res = decode_hf(torch, model, tok, ids, engine, new_tokens, device)
                t0 = time.perf_counter()
                par = parity_hf(torch, model, ids, engine, min(16, new_tokens)) if parity else None
        except Exception as exc:
            checks.append(failed_check(f"decode {name}", exc, since=t0))
            continue
        row = {"shape": target, "engine": engine, "device": device, "dtype": dtype_name, "weights_gb": round(nbytes / 1e9, 3),
               "prompt_len": prompt_len, "new_tokens": new_tokens, **res,
               "roofline_tokens_per_s": round(roofline, 1) if roofline else None,
               "pct_of_roofline": round(100 * res["tokens_per_s"] / roofline, 1) if roofline else None}
        rows.append(row)
        say(f"{name}: {row['tokens_per_s']} tokens/s ({METRIC}), TTFT {row['ttft_ms']} ms")
        if par:
            checks.append(_timed({"name": f"logits parity {name}", **par,
                           "detail": f"{par['what']} vs float32 eager: max abs error {par['max_abs_err']:.3g} (eager attention at "
                                     f"{dtype_name}: {par['eager_max_abs_err']:.3g}; pass <= {par['allowed_abs_err']:.3g}); top-1 "
                                     f"agreement {par['top1_agree']:.0%} (eager {par['eager_top1_agree']:.0%}) "
                                     f"over {par['steps']} steps"}, t0))
        if lambada_texts and engine != "vllm" and target not in SHAPES:  # random-weight shapes have no words to score
            if tok is None:
                checks.append({"name": f"lambada {name}", "ok": False, "detail": "LAMBADA needs the model directory's tokenizer"})
                continue
            say(f"LAMBADA {name}: {len(lambada_texts)} texts")
            t0 = time.perf_counter()
            try:
                accuracy.append({"model": target, **lambada(torch, model, tok, list(lambada_texts), engine, device)})
            except Exception as exc:
                checks.append(failed_check(f"lambada {name}", exc, since=t0))
    del model
    _free(torch, device)
    if scratch:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return rows, checks, accuracy


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


VENDOR_OF_PLATFORM = {"cuda": "nvidia", "rocm": "amd", "dtk": "hygon"}
TARGET_CHECK = "GPU the image was built for"
DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dri")


def read_solution(path: str = SOLUTION_PATH):
    """The image's solution document (written by envkit generate), or None where there is none or it does not parse."""
    try:
        with open(path) as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def _archs(value) -> list:
    return [str(a) for a in value] if isinstance(value, list) else []


def built_for(solution) -> dict | None:
    """What a GPU image was built for, from its solution: the platform, its vendor, the GPU named at build time and the
    arch list of every compiled part (torch's build, flash-attn and the csrc kernels compiled for the target). None for
    a CPU image, or where no solution says."""
    if not isinstance(solution, dict) or solution.get("platform") not in VENDOR_OF_PLATFORM:
        return None
    gpu = solution.get("gpu") if isinstance(solution.get("gpu"), dict) else {}
    parts = {}
    torch_part = solution.get("torch") if isinstance(solution.get("torch"), dict) else {}
    if _archs(torch_part.get("archs")):
        parts["torch"] = _archs(torch_part.get("archs")) + ([f"{torch_part['ptx']}+PTX"] if torch_part.get("ptx") else [])
    fa = solution.get("flash_attn") if isinstance(solution.get("flash_attn"), dict) else {}
    if fa.get("build") == "source" and _archs(fa.get("arch_list")):
        parts["flash-attn"] = _archs(fa.get("arch_list"))
    for k in solution.get("kernels") or []:
        if isinstance(k, dict) and _archs(k.get("arch_list")):
            parts[f"csrc {k.get('name')}"] = _archs(k.get("arch_list"))
    toolkit = solution.get("toolkit") if isinstance(solution.get("toolkit"), dict) else {}
    return {"platform": solution["platform"], "vendor": VENDOR_OF_PLATFORM[solution["platform"]], "gpu": gpu.get("name"),
            "arch": gpu.get("arch"), "toolkit": toolkit.get("version"), "parts": parts}


def _as_arch_tokens(archs: list) -> list:
    """A build's arch list as torch's tokens: "9.0" -> sm_90, "9.0+PTX" -> sm_90 and compute_90; sm_/compute_/gfx kept."""
    out = []
    for a in archs:
        base, ptx = (a[:-4], True) if a.upper().endswith("+PTX") else (a, False)
        if "." in base and base.replace(".", "").isdigit():
            digits = base.replace(".", "")
            out += [f"sm_{digits}"] + ([f"compute_{digits}"] if ptx else [])
        else:
            out.append(base)
    return out


def part_runs(seen_arch: str, archs: list) -> bool:
    """Whether code built for `archs` runs on a device of `seen_arch` (sm_XY or gfxNNN)."""
    if seen_arch.startswith("gfx"):
        return seen_arch in [a.split(":")[0] for a in archs]
    digits = seen_arch.split("_")[-1]
    if not digits.isdigit():
        return False
    return arch_runs((int(digits[:-1]), int(digits[-1])), _as_arch_tokens(archs))


def seen_gpus(torch) -> dict:
    """The GPUs torch sees here: its backend (cuda, hip or none) and each device's name and arch."""
    backend = "hip" if getattr(torch.version, "hip", None) else "cuda" if getattr(torch.version, "cuda", None) else None
    devices = []
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        count = 0
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        gcn = getattr(props, "gcnArchName", "") or ""
        arch = gcn.split(":")[0] if backend == "hip" and gcn else f"sm_{props.major}{props.minor}"
        devices.append({"name": torch.cuda.get_device_name(i), "arch": arch})
    return {"backend": backend, "devices": devices, "nodes": [n for n in DEVICE_NODES if os.path.exists(n)]}


def _what(target: dict) -> str:
    gpu = f"{target['gpu']} ({target['arch']})" if target.get("gpu") else f"{target['vendor']} GPUs"
    return f"{gpu}, {target['platform']}{' ' + str(target['toolkit']) if target.get('toolkit') else ''}"


def target_check(target, seen: dict, allow_cpu: bool = False) -> dict | None:
    """The verdict on whether this container has the GPUs the image was built for: none seen, torch of the other
    vendor's backend, or a device whose arch a compiled part does not cover fails (with the fix); --allow-cpu lets a
    run without any GPU pass, saying so. None for a CPU image."""
    if target is None:
        return None
    what = _what(target)
    devices = seen.get("devices") or []
    if not devices:
        if allow_cpu:
            return {"name": TARGET_CHECK, "ok": True, "allowed_cpu": True,
                    "detail": f"no GPU here; --allow-cpu: the image is built for {what}, and only its CPU path was tested"}
        nodes = seen.get("nodes") or []
        here = (f"{', '.join(nodes)} {'is' if len(nodes) == 1 else 'are'} here but torch sees no GPU (CUDA_VISIBLE_DEVICES, "
                "HIP_VISIBLE_DEVICES or the container's device list hides them)" if nodes else "no GPU device is in the container")
        return {"name": TARGET_CHECK, "ok": False,
                "detail": f"built for {what}, but {here}: run it where the GPUs are passed in (envkit selftest --image passes "
                          "them; docker run --gpus all for NVIDIA, --device /dev/kfd --device /dev/dri for AMD and Hygon; a CI "
                          "job on a GPU runner), or add --allow-cpu to test only its CPU path"}
    want_backend = "hip" if target["vendor"] in ("amd", "hygon") else "cuda"
    if seen.get("backend") and seen["backend"] != want_backend:
        return {"name": TARGET_CHECK, "ok": False,
                "detail": f"built for {what}, but this torch runs on {seen['backend']}: the image's torch is not the one its "
                          "solution names; rebuild it (envkit build)"}
    misses = [f"{part} ({' '.join(archs)}) does not run on {d['name']} {d['arch']}"
              for d in devices for part, archs in target["parts"].items() if not part_runs(d["arch"], archs)]
    names = ", ".join(sorted({f"{d['name']} ({d['arch']})" for d in devices}))
    if misses:
        return {"name": TARGET_CHECK, "ok": False,
                "detail": f"built for {what}; here: {names}. {'; '.join(sorted(set(misses)))}: build for this GPU "
                          f"(envkit generate --gpu {devices[0]['arch']}), or run it on the GPU it was built for"}
    covered = ", ".join(f"{part} {' '.join(archs)}" for part, archs in target["parts"].items())
    return {"name": TARGET_CHECK, "ok": True,
            "detail": f"built for {what}; here: {len(devices)} x {names}{'; runs ' + covered if covered else ''}"}


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


def run(quick: bool, shapes: tuple = (), engines: tuple = ("hf",), peak_gbs: float = 0.0, models: tuple = (), parity: bool = False,
        input_len: int = 128, output_len: int = 0, lambada_path: str = "", lambada_limit: int = 500, say=_quiet,
        peak_lookup=None, allow_cpu: bool = False, solution_path: str = SOLUTION_PATH) -> dict:
    """The self-test's document; what it does now goes to `say` (one line a step), never to stdout. The HBM peak is
    peak_gbs, else the image's solution's, else peak_lookup(GPU name) (the CLI's matrix row for this GPU). The GPUs the
    image's solution names must be here (TARGET_CHECK), unless allow_cpu lets a run without any pass."""
    doc: dict = {"schema": 1, "python": platform.python_version(), "checks": [], "decode": None, "models": [], "lambada": []}
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    say("importing torch")
    t0 = time.perf_counter()
    try:
        import torch
    except Exception as exc:  # an image without torch is the finding, not a crash
        doc["checks"].append(failed_check("torch imports", exc, limit=None, since=t0))
        doc["ok"] = False
        return doc
    doc["torch"] = torch.__version__
    doc["checks"].append(_timed({"name": "torch imports", "ok": True, "detail": torch.__version__}, t0))
    target = built_for(read_solution(solution_path))
    if target is not None:
        doc["target"] = target
        t0 = time.perf_counter()
        doc["gpus"] = seen = seen_gpus(torch)
        check = target_check(target, seen, allow_cpu)
        if check is not None:
            doc["checks"].append(_timed(check, t0))
    device = "cpu"
    if torch.cuda.is_available():
        device = "cuda"
        t0 = time.perf_counter()
        cc = torch.cuda.get_device_capability(0)
        arch = f"sm_{cc[0]}{cc[1]}"
        archs = torch.cuda.get_arch_list()
        ok = arch_runs(cc, archs)
        doc["checks"].append(_timed({"name": "GPU arch in torch's build", "ok": ok,
                                     "detail": f"{torch.cuda.get_device_name(0)} {arch}; torch has {' '.join(archs)}"}, t0))
    doc["device"] = device
    peak, source = resolve_peak(peak_gbs, torch.cuda.get_device_name(0) if device == "cuda" else "", peak_lookup, solution_path)
    if device == "cuda":
        for what, check in (("memory bandwidth", lambda: [check_bandwidth(torch, peak, source)]),
                            ("flash-attn", lambda: [c for c in [check_flash_attn(torch)] if c]),
                            ("the csrc kernels", lambda: check_kernels(torch)), ("NCCL", lambda: [c for c in [check_nccl(torch)] if c])):
            say(f"checking {what}")
            t0 = time.perf_counter()
            try:
                doc["checks"].extend(_timed(c, t0) for c in check())
            except Exception as exc:
                doc["checks"].append(failed_check("GPU check", exc, limit=200, since=t0))
    new_tokens = output_len or (32 if quick else 128)
    texts: tuple = ()
    if lambada_path:
        try:
            with open(lambada_path, encoding="utf-8") as f:
                texts = tuple(read_lambada(f.read(), lambada_limit))
        except (OSError, ValueError) as exc:
            doc["checks"].append({"name": "lambada file", "ok": False, "detail": f"{lambada_path}: {exc}"})
    for target in (*shapes, *models):
        try:
            rows, checks, acc = measure_target(torch, target, engines, device, input_len, new_tokens, peak, parity, texts, say)
        except Exception as exc:  # the model itself could not be built or loaded
            rows, checks, acc = [], [failed_check(f"load {target}", exc)], []
        doc["models"] += rows
        doc["checks"] += checks
        doc["lambada"] += acc
    say(f"decoding with the {BUILTIN_DECODER}")
    t0 = time.perf_counter()
    try:
        doc["decode"] = d = decode(torch, device, prompt_len=input_len, new_tokens=32 if quick else 128)
        doc["checks"].append(_timed({"name": "decode (built-in decoder)", "ok": d["tokens_per_s"] > 0,
                                     "detail": decode_detail(d, device)}, t0))
    except Exception as exc:
        doc["checks"].append(failed_check("decode (built-in decoder)", exc, limit=None, since=t0))
    doc["ok"] = all(c["ok"] for c in doc["checks"])
    return doc


def decode_detail(d: dict, device: str) -> str:
    """The built-in decode's check line: what the figure is and what it is not (newcomer review 3, D16)."""
    load = f", load {d['load_1min']}" if d.get("load_1min") is not None else ""
    return (f"{d['tokens_per_s']} tokens/s ({METRIC}, median of {d['runs']}: {d['tokens_per_s_min']}-{d['tokens_per_s_max']}) on "
            f"{device}, {d['threads']} thread(s){load}: the {BUILTIN_DECODER}, a smoke figure that decoding runs, not a speed "
            "verdict (without a KV cache each step recomputes the whole sequence, so TPOT can exceed TTFT); the speed checks "
            "are the bandwidth check and --shape models against their roofline")


@contextlib.contextmanager
def stdout_to_stderr():
    """Everything written to file descriptor 1 while inside goes to 2 (libraries, vLLM's engine process, NCCL), so
    that stdout carries only the JSON document written after."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="envkit self-test (runs inside an image)")
    p.add_argument("--quick", action="store_true", help="checks and a short decode: a verdict in well under a minute")
    p.add_argument("--json", action="store_true")
    p.add_argument("--shape", action="append", default=[], choices=sorted(SHAPES), help="decode a random-weight model of this shape")
    p.add_argument("--model", action="append", default=[], metavar="DIR",
                   help="decode a local model directory (its tokenizer too: characters/s)")
    p.add_argument("--engine", action="append", default=[], choices=DECODERS,
                   help="hf (eager), hf-static (static cache), vllm (offline engine)")
    p.add_argument("--parity", action="store_true", help="compare each engine's logits with the eager-attention reference")
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens of the decode")
    p.add_argument("--output-len", type=int, default=0, help="new tokens of the decode (default 128, 32 with --quick)")
    p.add_argument("--lambada", default="", metavar="JSONL", help="LAMBADA last-word accuracy of each --model ({\"text\": ...} lines)")
    p.add_argument("--lambada-limit", type=int, default=500, help="examples read from the LAMBADA file")
    p.add_argument("--peak-gbs", type=float, default=0.0, help="the GPU's HBM peak, when no /opt/envkit/solution.json says it")
    p.add_argument("--allow-cpu", action="store_true", help="pass without a GPU, though the image is built for one (its CPU path only)")
    p.add_argument("--solution", default=SOLUTION_PATH, metavar="JSON", help="the solution the image was built from")
    a = p.parse_args(argv)
    if a.input_len < 1 or a.output_len < 0 or a.output_len == 1:
        p.error("--input-len must be at least 1 and --output-len at least 2")
    if a.lambada:
        if not a.model:
            p.error("--lambada needs --model DIR (a real model with its tokenizer)")
        try:
            with open(a.lambada, encoding="utf-8") as f:
                read_lambada(f.read(), a.lambada_limit)
        except (OSError, ValueError) as exc:
            p.error(f"--lambada {a.lambada}: {exc}")
        if not set(a.engine or ["hf"]) & {"hf", "hf-static"}:
            p.error("--lambada runs on the hf and hf-static engines: add --engine hf")
    def say(message: str) -> None:
        sys.stderr.write(f"selftest: {message}\n")
        sys.stderr.flush()

    with stdout_to_stderr():
        doc = run(a.quick, tuple(a.shape), tuple(a.engine) or ("hf",), a.peak_gbs, tuple(a.model), a.parity, a.input_len, a.output_len,
                  a.lambada, a.lambada_limit, say, allow_cpu=a.allow_cpu, solution_path=a.solution)
    if a.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        for c in doc["checks"]:
            sys.stdout.write(f"{'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}\n")
        for mdl in doc["models"]:
            roof = f", {mdl['pct_of_roofline']}% of {mdl['roofline_tokens_per_s']} tok/s roofline" if mdl["roofline_tokens_per_s"] else ""
            runs = f" (median of {mdl['runs']}, {mdl['tokens_per_s_min']}-{mdl['tokens_per_s_max']})" if mdl.get("runs") else ""
            sys.stdout.write(f"     {mdl['shape']} {mdl['engine']}: {mdl['tokens_per_s']} tok/s ({METRIC}){runs}, TTFT {mdl['ttft_ms']} "
                             f"ms{roof}\n")
        for acc in doc["lambada"]:
            sys.stdout.write(f"     LAMBADA {acc['model']} {acc['engine']}: {acc['accuracy']:.1%} of {acc['examples']} in {acc['seconds']} "
                             "s\n")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
