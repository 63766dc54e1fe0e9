"""An independent decode timing beside the self-test's, in the same process and call (docs/selftest-h200.md).

    python benchmarks/decode_harness.py --shape llama-2-7b --engine hf --engine hf-static [--out FILE.json]

First the self-test runs as `envkit selftest --shape S --engine E ... --json` would on this host (envkit's app layer:
the HBM peak from --peak-gbs, /opt/envkit/solution.json, or the matrix row of the GPU's name; the script alone when
envkit's dependencies are missing). Then this harness builds the same model (same shape, seed, dtype), the same
prompt (same seed, same length) and times the same tokens another way: inside ONE plain HF `generate(N)` call, a
streamer takes a timestamp (after a CUDA synchronize) as each new token comes out; tokens/s = (N - 1) / (t_N - t_1),
the decode of tokens 2..N after the first token. The self-test times the same quantity by difference of two calls,
(T(generate N) - T(generate 1)) / (N - 1). The two are compared in paired rounds on the one model: each round runs the
self-test's own decode_hf (one run) and then the harness, back to back, and the agreement is the median of the
rounds' ratios (a shared GPU host drifts over minutes; a pair does not). It prints the self-test's document figures,
the paired ratios and the bandwidth check's rates; it exits 1 unless every engine's median ratio is within 3 %.
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


class TokenClock:
    """A generate() streamer: the time each put() (the prompt, then each new token) arrives, after the GPU is done."""

    def __init__(self, torch, device: str) -> None:
        self.torch, self.device, self.times = torch, device, []

    def put(self, value) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def harness(torch, shape: str, engines: tuple, input_len: int, new_tokens: int, rounds: int) -> dict:
    """Paired rounds on the self-test's model and prompt: the self-test's decode_hf (one run), then per-token timestamps
    inside one generate(); {engine: {selftest, harness, ratio: spreads over the rounds, ...}}."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model, _, _ = script.load_target(torch, shape, device, dtype)  # same config, seed 0, dtype as the self-test
    torch.manual_seed(1)  # same prompt as measure_target's
    ids = torch.randint(10, model.config.vocab_size, (1, input_len), device=device)
    kw = dict(do_sample=False, pad_token_id=0)
    out = {}

    def clocked(engine: str) -> list:
        extra = {"cache_implementation": "static"} if engine == "hf-static" else {}
        clock = TokenClock(torch, device)
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, streamer=clock, **kw, **extra)
        return clock.times[1:]  # times[0]: the prompt, put before the prefill

    for engine in engines:
        say(f"harness {shape} {engine}: {rounds} paired rounds of the self-test's decode (1 run) and one timestamped generate({new_tokens})")
        clocked(engine)  # warm-up (hf-static compiles here)
        mine, theirs = [], []
        for _ in range(rounds):
            theirs.append(script.decode_hf(torch, model, None, ids, engine, new_tokens, device, runs=1)["tokens_per_s"])
            t = clocked(engine)
            assert len(t) == new_tokens, f"the streamer saw {len(t)} tokens, not {new_tokens}"
            mine.append((new_tokens - 1) / max(t[-1] - t[0], 1e-9))
        ratios = [a / b for a, b in zip(theirs, mine)]
        out[engine] = {"selftest": script.spread(theirs), "harness": script.spread(mine),
                       "ratio": script.spread(ratios, 4),
                       "rounds": rounds, "prompt_len": input_len, "new_tokens": new_tokens, "tokens_timed": new_tokens - 1,
                       "method": "paired rounds: decode_hf (difference of two generate calls) vs one generate() with timestamps of tokens 1 and N"}
    model = None  # the 13 GB of weights go before the caller goes on
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="llama-2-7b", choices=sorted(script.SHAPES))
    p.add_argument("--engine", action="append", default=[], choices=("hf", "hf-static"))
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5, help="paired rounds per engine")
    p.add_argument("--peak-gbs", type=float, default=0.0)
    p.add_argument("--out", default="", help="write both documents and the ratios here as JSON")
    a = p.parse_args(argv)
    engines = tuple(a.engine) or ("hf", "hf-static")
    import torch

    with script.stdout_to_stderr():
        doc, how = selftest_doc(a.shape, engines, a.input_len, a.output_len, a.peak_gbs)
        mine = harness(torch, a.shape, engines, a.input_len, a.output_len, a.rounds)
    bw = next((c for c in doc["checks"] if c["name"].startswith("memory bandwidth")), None)
    lines = [f"self-test via {how}; torch {doc.get('torch')}, "
             f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'}"]
    if bw:
        lines.append(f"bandwidth check: {'ok' if bw['ok'] else 'FAIL'}: {bw['detail']}")
    ratios = {}
    for row in doc["models"]:
        lines.append(f"{a.shape} {row['engine']}: self-test document {row['tokens_per_s']} tok/s (median of {row.get('runs', 1)}, "
                     f"{row.get('tokens_per_s_min', '-')}-{row.get('tokens_per_s_max', '-')}), prompt {row['prompt_len']}, "
                     f"{row['new_tokens']} new; roofline {row['roofline_tokens_per_s']} tok/s ({row['pct_of_roofline']} %)")
    for engine, h in mine.items():
        ratios[engine] = r = h["ratio"]["median"]
        lines.append(f"{a.shape} {engine}, {h['rounds']} paired rounds: self-test {h['selftest']['median']} "
                     f"({h['selftest']['min']}-{h['selftest']['max']}), harness {h['harness']['median']} "
                     f"({h['harness']['min']}-{h['harness']['max']}) tok/s; ratio self-test/harness median {r:.3f} "
                     f"({h['ratio']['min']:.3f}-{h['ratio']['max']:.3f})")
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
