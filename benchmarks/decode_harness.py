"""An independent decode timing beside the self-test's, in the same process and call (docs/selftest-h200.md).

    python benchmarks/decode_harness.py --shape llama-2-7b --engine hf --engine hf-static [--out FILE.json]

First the self-test runs as `envkit selftest --shape S --engine E ... --json` would on this host (envkit's app layer:
the HBM peak from --peak-gbs, /opt/envkit/solution.json, or the matrix row of the GPU's name; the script alone when
envkit's dependencies are missing). Then this harness builds the same model (same shape, seed, dtype), the same
prompt (same seed, same length) and times plain HF `generate()` by difference: tokens/s = N / (T(generate K+N) -
T(generate K)), K warm-up tokens, the median of several runs with min and max. It prints both figures and their
ratio, and the bandwidth check's rates. The self-test's own TPOT is (T(generate N) - T(generate 1)) / (N - 1).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envkit.inimage import selftest as script  # noqa: E402


def selftest_doc(shape: str, engines: tuple, input_len: int, output_len: int, peak_gbs: float) -> tuple:
    """(the self-test's document, how it ran): through envkit's app layer where it imports, else the script."""
    try:
        from envkit.app import selftest as app
    except ImportError as exc:
        doc = script.run(False, (shape,), engines, peak_gbs, (), False, input_len, output_len, say=say)
        return doc, f"the in-image script alone (envkit's app layer does not import: {exc})"
    req = app.SelftestRequest(engines=engines, shapes=(shape,), peak_gbs=peak_gbs or None, input_len=input_len, output_len=output_len)
    return app.run_here(req, app_reporter()).to_json(), "envkit's app layer (envkit selftest on this host)"


def app_reporter():
    from envkit.app.reporter import Silent

    class Say(Silent):
        def say(self, message: str) -> None:
            say(message)

    return Say()


def say(message: str) -> None:
    sys.stderr.write(f"harness: {message}\n")
    sys.stderr.flush()


def harness(torch, shape: str, engines: tuple, input_len: int, new_tokens: int, warm_tokens: int, runs: int) -> dict:
    """Difference timing of plain generate() on the self-test's model and prompt: {engine: {median, min, max, ...}}."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model, _, _ = script.load_target(torch, shape, device, dtype)  # same config, seed 0, dtype as the self-test
    torch.manual_seed(1)  # same prompt as measure_target's
    ids = torch.randint(10, model.config.vocab_size, (1, input_len), device=device)
    kw = dict(do_sample=False, pad_token_id=0)
    out = {}

    def timed(model, n: int, engine: str) -> float:
        extra = {"cache_implementation": "static"} if engine == "hf-static" else {}
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw, **extra)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    for engine in engines:
        say(f"harness {shape} {engine}: T(generate {warm_tokens + new_tokens}) - T(generate {warm_tokens}), {runs} runs")
        timed(model, warm_tokens + new_tokens, engine)  # warm-up
        rates = []
        for _ in range(runs):
            short = timed(model, warm_tokens, engine)
            long = timed(model, warm_tokens + new_tokens, engine)
            rates.append(new_tokens / max(long - short, 1e-9))
        out[engine] = {**script.spread(rates), "runs": runs, "prompt_len": input_len, "tokens_timed": new_tokens,
                       "warm_tokens": warm_tokens}
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="llama-2-7b", choices=sorted(script.SHAPES))
    p.add_argument("--engine", action="append", default=[], choices=("hf", "hf-static"))
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--warm-tokens", type=int, default=16, help="K: tokens of the shorter generate subtracted")
    p.add_argument("--runs", type=int, default=script.DECODE_RUNS)
    p.add_argument("--peak-gbs", type=float, default=0.0)
    p.add_argument("--out", default="", help="write both documents and the ratios here as JSON")
    a = p.parse_args(argv)
    engines = tuple(a.engine) or ("hf", "hf-static")
    import torch

    with script.stdout_to_stderr():
        doc, how = selftest_doc(a.shape, engines, a.input_len, a.output_len, a.peak_gbs)
        mine = harness(torch, a.shape, engines, a.input_len, a.output_len, a.warm_tokens, a.runs)
    bw = next((c for c in doc["checks"] if c["name"].startswith("memory bandwidth")), None)
    lines = [f"self-test via {how}; torch {doc.get('torch')}, "
             f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'}"]
    if bw:
        lines.append(f"bandwidth check: {'ok' if bw['ok'] else 'FAIL'}: {bw['detail']}")
    ratios = {}
    for row in doc["models"]:
        h = mine.get(row["engine"])
        if not h:
            continue
        ratios[row["engine"]] = r = row["tokens_per_s"] / h["median"]
        lines.append(f"{a.shape} {row['engine']}: self-test {row['tokens_per_s']} tok/s (median of {row.get('runs', 1)}, "
                     f"{row.get('tokens_per_s_min', '-')}-{row.get('tokens_per_s_max', '-')}), prompt {row['prompt_len']}, "
                     f"{row['new_tokens']} new; harness {h['median']} ({h['min']}-{h['max']}), prompt {h['prompt_len']}, "
                     f"{h['tokens_timed']} timed after {h['warm_tokens']}; ratio self-test/harness {r:.3f}; "
                     f"roofline {row['roofline_tokens_per_s']} tok/s ({row['pct_of_roofline']} %)")
    for c in doc["checks"]:
        if not c["ok"]:
            lines.append(f"FAIL {c['name']}: {c['detail']}")
    sys.stdout.write("\n".join(lines) + "\n")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"selftest": doc, "harness": mine, "ratios": ratios, "how": how}, f, indent=2)
    return 0 if doc["ok"] and all(abs(r - 1) <= 0.03 for r in ratios.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
